"""tfviz: an instrumented transformer you can train, record and look inside."""
from .model import HOOK_SHAPES, KVCache, ModelConfig, Transformer
from .recording import Recording, positional_tables, record
# The training function stays tfviz.train.train: binding a top-level name "train" would shadow
# the tfviz.train package itself (and break `import tfviz.train.loop`).
from .train import TrainConfig, TrainResult
from .runs import JobManager
from .train.checkpoint import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint
from .version import __version__
from .interop import ModelFolderError, from_pretrained, to_hf  # noqa: E402 (needs train.checkpoint)

__all__ = ["HOOK_SHAPES", "Checkpoint", "CheckpointError", "JobManager", "KVCache", "ModelConfig",
           "Recording", "TrainConfig", "TrainResult", "Transformer", "load_checkpoint",
           "ModelFolderError", "from_pretrained", "positional_tables", "record", "save_checkpoint",
           "to_hf", "__version__"]
