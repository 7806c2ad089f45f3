"""Training: ``train(model, task, TrainConfig(...), callbacks=[...]) -> TrainResult``, and a
``JobManager`` that runs trainings in background threads for the app."""
from .budget import BudgetError, check_training
from .config import TrainConfig
from .jobs import Job, JobLimitError, JobManager, JobSnapshot
from .loop import Event, TrainResult, token_loss, train
from .optim import lr_at
from .setup import model_config_for, new_model
from .snapshot import AttentionSnapshot

__all__ = ["AttentionSnapshot", "BudgetError", "Event", "Job", "JobLimitError", "JobManager",
           "JobSnapshot", "TrainConfig", "TrainResult", "check_training", "lr_at", "model_config_for", "new_model", "token_loss", "train"]
