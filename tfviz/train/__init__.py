"""Training: ``train(model, task, TrainConfig(...), callbacks=[...]) -> TrainResult``; a
``JobManager`` that runs trainings in background threads (library use), and a ``RunManager``
(``tfviz.train.runs``) whose runs are records in a run store, trained by worker processes (the
app's)."""
from .budget import BudgetError, check_training
from .config import TrainConfig
from .jobs import Job, JobLimitError, JobManager, JobSnapshot
from .loop import Event, TrainResult, token_loss, train
from .optim import lr_at
from .runs import RunManager
from .setup import model_config_for, new_model
from .snapshot import AttentionSnapshot

__all__ = ["AttentionSnapshot", "BudgetError", "Event", "Job", "JobLimitError", "JobManager",
           "JobSnapshot", "RunManager", "TrainConfig", "TrainResult", "check_training", "lr_at", "model_config_for", "new_model", "token_loss", "train"]
