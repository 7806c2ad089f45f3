"""Outside formats, kept at the border: Hugging Face model folders in, transformers out.

    from_pretrained(path)  a save_pretrained folder / hub-cache entry -> tfviz Checkpoint (load.py)
    import_folder(path, out)  ... written as a tfviz checkpoint (``python -m tfviz import``)
    list_models()          the model folders on this machine, cheaply (discover.py); catalogue():
                           the same, refreshed in the background for a picker
    to_hf(model)           a tfviz model -> transformers: GPT-2, Llama or BERT (export.py)
Families (one adapter each, families.py): GPT-2, BERT, Llama (and Mistral / Qwen2 configs).
bertviz takes ``Recording.to_bertviz()`` directly.
"""
from .discover import Catalogue, ModelInfo, catalogue, inspect, list_models
from .export import to_hf
from .families import ADAPTERS, MODEL_TYPES
from .folder import LOCAL_MAX_BYTES, ModelFolderError, local_max_bytes
from .load import from_pretrained, import_folder

__all__ = ["ADAPTERS", "Catalogue", "LOCAL_MAX_BYTES", "MODEL_TYPES", "ModelFolderError", "ModelInfo",
           "catalogue", "from_pretrained", "import_folder", "inspect", "list_models", "local_max_bytes",
           "to_hf"]
