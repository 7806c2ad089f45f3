"""Training itself: ``train(model, task, TrainConfig(...), callbacks=[...]) -> TrainResult``, its
config, optimiser, checkpoints, presets and budget. Where and when a run trains (the run store,
workers, executors, Ray, the managers) is ``tfviz.runs``, one layer above."""
from .budget import BudgetError, check_training
from .config import TrainConfig
from .loop import Event, TrainResult, token_loss, train
from .optim import lr_at
from .setup import model_config_for, new_model
from .snapshot import AttentionSnapshot

__all__ = ["AttentionSnapshot", "BudgetError", "Event", "TrainConfig", "TrainResult", "check_training", "lr_at",
           "model_config_for", "new_model", "token_loss", "train"]
