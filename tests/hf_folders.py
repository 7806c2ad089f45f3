"""Small Hugging Face model folders for the interop tests, built offline: a random model from
``transformers`` with every parameter perturbed (fresh LayerNorms are ones and zeros, which hide
mapping bugs), saved with ``save_pretrained`` next to a ``tokenizer.json`` made with the
``tokenizers`` library whose special tokens are *not* at ids 0-6 (as in GPT-2, BERT, Llama)."""
from __future__ import annotations

from pathlib import Path

import torch

CORPUS = ["the cat sat on the mat and the dog sat on the log",
          "a quick brown fox jumps over the lazy dog !",
          "hello world , this is a small test of tokenizers ; numbers 1 2 3 4 5",
          "attention is all you need , said the paper about transformers"] * 4


def _save_tokenizer(tok, folder: Path, **special) -> None:
    from transformers import PreTrainedTokenizerFast
    PreTrainedTokenizerFast(tokenizer_object=tok, **special).save_pretrained(str(folder))


def gpt2_tokenizer(folder: Path, vocab: int = 300) -> int:
    """Byte-level BPE; <|endoftext|> added last (GPT-2: id 50256). -> vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=vocab - 1, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens(["<|endoftext|>"])
    _save_tokenizer(tok, folder, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                    unk_token="<|endoftext|>")
    return tok.get_vocab_size()


def bert_tokenizer(folder: Path) -> int:
    """WordPiece with BERT's normalizer; [PAD]=0 and the other specials after the words
    (BERT: [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103); [CLS] $A [SEP] template."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    trained = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    trained.normalizer = normalizers.BertNormalizer(lowercase=True)
    trained.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trained.train_from_iterator(CORPUS, trainers.WordPieceTrainer(
        vocab_size=120, special_tokens=["[PAD]"], show_progress=False))
    words = sorted(trained.get_vocab().items(), key=lambda kv: kv[1])
    vocab = {w: i for i, (w, _) in enumerate(words)}
    for special in ("[UNK]", "[CLS]", "[SEP]", "[MASK]"):  # in the vocabulary, after the words
        vocab[special] = len(vocab)
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer = trained.normalizer, trained.pre_tokenizer
    tok.decoder = decoders.WordPiece()
    tok.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    _save_tokenizer(tok, folder, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                    mask_token="[MASK]", pad_token="[PAD]")
    return tok.get_vocab_size()


def llama_tokenizer(folder: Path) -> int:
    """SentencePiece-style BPE over Metaspace pieces; <unk>, <s>, </s> added last; <s> $A template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    import json
    trained = Tokenizer(models.BPE(unk_token="<unk>"))
    trained.pre_tokenizer = pre_tokenizers.Metaspace()
    trained.decoder = decoders.Metaspace()
    trained.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=150, show_progress=False))
    spec = json.loads(trained.to_str())
    vocab = spec["model"]["vocab"]
    for special in ("<unk>", "<s>", "</s>"):  # in the vocabulary, after the pieces
        vocab[special] = len(vocab)
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    _save_tokenizer(tok, folder, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    return tok.get_vocab_size()


def perturb(model, seed: int = 0, scale: float = 0.05) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))


def build(kind: str, folder: Path, seed: int = 0, **overrides):
    """Write a folder of ``kind`` (gpt2, gpt2-untied, bert, bert-untied, bert-base, llama, mistral,
    qwen2) and
    return the transformers model (eval, eager attention, float32)."""
    import transformers as tf
    tf.utils.logging.disable_progress_bar()  # no "Writing model shards" bars in the test log
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    if kind.startswith("gpt2"):
        vocab = gpt2_tokenizer(folder)
        eot = vocab - 1
        cfg = tf.GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=vocab, n_positions=40,
                            bos_token_id=eot, eos_token_id=eot, tie_word_embeddings=kind == "gpt2",
                            **overrides)
        model = tf.GPT2LMHeadModel(cfg)
    elif kind.startswith("bert"):
        vocab = bert_tokenizer(folder)
        cfg = tf.BertConfig(num_hidden_layers=2, num_attention_heads=4, hidden_size=64,
                            intermediate_size=96, vocab_size=vocab, max_position_embeddings=40,
                            type_vocab_size=2, pad_token_id=0,
                            **{"tie_word_embeddings": kind != "bert-untied", **overrides})
        model = (tf.BertModel if kind == "bert-base" else tf.BertForMaskedLM)(cfg)
    else:
        vocab = llama_tokenizer(folder)
        config_cls, model_cls = {"llama": (tf.LlamaConfig, tf.LlamaForCausalLM),
                                 "mistral": (tf.MistralConfig, tf.MistralForCausalLM),
                                 "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM)}[kind]
        bos, eos = vocab - 2, vocab - 1
        extra = dict(sliding_window=None) if kind == "mistral" else {}
        extra.update(overrides)
        cfg = config_cls(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
                         intermediate_size=96, vocab_size=vocab + (7 if kind == "qwen2" else 0),
                         max_position_embeddings=64, rope_theta=500.0, bos_token_id=bos, eos_token_id=eos,
                         **extra)
        model = model_cls(cfg)
    perturb(model, seed)
    model.config._attn_implementation = "eager"
    model.eval()
    model.save_pretrained(str(folder))
    return model


TINY_WORDS = ["<|endoftext|>", "[UNK]", "the", "cat", "sat", "on", "mat", "a", "dog", "log", "and", "."]


def tiny_gpt2(folder: Path, seed: int = 0, d: int = 8, layers: int = 1, positions: int = 16) -> Path:
    """A GPT-2 folder of a few kB written without transformers (config.json, model.safetensors
    with GPT-2's names and Conv1D layout, a word-level tokenizer.json): quick to build and to
    break in every way for the malformed-folder tests."""
    import json

    from safetensors.torch import save_file
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder.mkdir(parents=True, exist_ok=True)
    vocab = len(TINY_WORDS)
    g = torch.Generator().manual_seed(seed)
    t = {"wte.weight": (vocab, d), "wpe.weight": (positions, d), "ln_f.weight": (d,), "ln_f.bias": (d,)}
    for i in range(layers):
        h = f"h.{i}."
        t.update({h + "ln_1.weight": (d,), h + "ln_1.bias": (d,), h + "ln_2.weight": (d,), h + "ln_2.bias": (d,),
                  h + "attn.c_attn.weight": (d, 3 * d), h + "attn.c_attn.bias": (3 * d,),
                  h + "attn.c_proj.weight": (d, d), h + "attn.c_proj.bias": (d,),
                  h + "mlp.c_fc.weight": (d, 4 * d), h + "mlp.c_fc.bias": (4 * d,),
                  h + "mlp.c_proj.weight": (4 * d, d), h + "mlp.c_proj.bias": (d,)})
    save_file({k: 0.1 * torch.randn(s, generator=g) for k, s in t.items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": layers, "n_head": 2,
              "n_embd": d, "n_positions": positions, "vocab_size": vocab, "bos_token_id": 0, "eos_token_id": 0}
    (folder / "config.json").write_text(json.dumps(config))
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(TINY_WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["<|endoftext|>"])
    tok.save(str(folder / "tokenizer.json"))
    return folder
