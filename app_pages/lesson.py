"""Lesson: the lecture as ordered steps on real models (issue 32) — one step at a time, each with
its live view and what to notice; presenting for a projector; a class that follows its teacher;
the whole lesson as one offline HTML file. The steps are data (``ui.lesson_steps``), the
machinery is ``ui.lesson``."""
from ui.lesson import page

page()
