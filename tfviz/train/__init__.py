"""Training: ``train(model, task, TrainConfig(...), callbacks=[...]) -> TrainResult``, and a
``JobManager`` that runs trainings in background threads for the app."""
from .config import TrainConfig
from .jobs import Job, JobManager, JobSnapshot
from .loop import Event, TrainResult, token_loss, train
from .optim import lr_at
from .setup import model_config_for, new_model
from .snapshot import AttentionSnapshot

__all__ = ["AttentionSnapshot", "Event", "Job", "JobManager", "JobSnapshot", "TrainConfig",
           "TrainResult", "lr_at", "model_config_for", "new_model", "token_loss", "train"]
