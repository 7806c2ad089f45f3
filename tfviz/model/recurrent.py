"""Recurrent baselines — what came before attention: torch's RNN, LSTM and GRU as tfviz models that
train, record, generate and save like the transformers (``tfviz.model.families``).

    decoder          model(tokens)      -> logits [batch, pos, vocab]       reads left to right
    encoder-decoder  model(src, tgt)    -> logits [batch, tgt_pos, vocab]

One step of each cell (``torch.nn.RNN`` / ``LSTM`` / ``GRU``; x_t the input, h the hidden state):

    rnn    h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)                        (Elman 1990)
    lstm   i, f, o = σ(W_i,f,o x_t + U_i,f,o h_{t-1} + b) ;  g = tanh(W_g x_t + U_g h_{t-1} + b)
           c_t = f ⊙ c_{t-1} + i ⊙ g ;  h_t = o ⊙ tanh(c_t)         (Hochreiter & Schmidhuber 1997)
    gru    r, z = σ(W_r,z x_t + U_r,z h_{t-1} + b) ;  n = tanh(W_n x_t + b_n + r ⊙ (U_n h_{t-1} + b'_n))
           h_t = (1 - z) ⊙ n + z ⊙ h_{t-1}                                          (Cho et al. 2014)

Everything the network knows about tokens 1..t is h_t (and an LSTM's c_t): d_hidden numbers,
however long the text. A signal from token i reaches position t through t - i applications of
the cell, so the longest path is O(n) steps, and the gradient back to token i is a product of
t - i Jacobians (it vanishes or explodes with the distance); self-attention joins any two positions
in one step per layer (``tfviz.analysis.longrange``).

Encoder-decoder (each stack has ``n_layers`` cells; the decoder starts from the encoder's final
state: every layer's h, and c for an LSTM, taken at each row's last real source token):
    attention "none"      the decoder sees nothing else of the source: the whole source squeezed
                          into one fixed-size state (Sutskever et al. 2014; Cho et al. 2014)
    attention "additive"  Bahdanau et al. 2015 (``tfviz.model.additive``): at decoder step i, with
                          s_{i-1} the top layer's previous state and h_j the encoder's top states,
                              c_i = Σ_j softmax_j(v · tanh(W_q s_{i-1} + W_k h_j)) h_j
                              s_i = cell([embed(y_{i-1}); c_i], s_{i-1})
                              logits_i = W_out [s_i; c_i]

Padding: a source (``pad_id``, or ``padding_mask``) may be padded only at the end of a row — a
recurrent network reads every token in order, so a pad in the middle would be read as a token;
the encoder stops at each row's last real token. A decoder reads left to right, so padding at
the end changes nothing before it, and a decoder needs no padding mask at all.

Recorded names (``HOOK_SHAPES``; an encoder-decoder's are prefixed ``encoder.`` / ``decoder.``):
    hook_embed                            [batch, pos, d_model]    token embeddings
    blocks.{l}.hook_hidden                [batch, pos, d_hidden]   layer l's h_t
    blocks.{l}.hook_cell                  [batch, pos, d_hidden]   layer l's c_t (LSTM only; asking
                                                                   for it runs that layer step by step)
    decoder.cross_attn.hook_attn_scores   [batch, 1, q_pos, k_pos] e_ij (padding -inf)
    decoder.cross_attn.hook_pattern       [batch, 1, q_pos, k_pos] a_ij
    decoder.cross_attn.hook_context       [batch, pos, d_hidden]   c_i
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Union

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .additive import AdditiveAttention
from .config import VersionedConfig, _check_choice, _check_int
from .decoding import ModelAPI
from .hooks import HookPoint, name_hook_points
from .inputs import check_arity, check_tokens, find_padding

RECURRENT_FORMAT_VERSION = 1  # of RecurrentConfig.to_dict()
CELLS: dict[str, type[nn.RNNBase]] = {"rnn": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU}
CELL_NAMES = {"rnn": "RNN (tanh)", "lstm": "LSTM", "gru": "GRU"}
ARCHS = ("decoder", "encoder-decoder")
ATTENTIONS = ("none", "additive")

State = Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]  # [1, batch, d_hidden]; LSTM (h, c)


@dataclass(frozen=True)
class RecurrentConfig(VersionedConfig):
    """Everything needed to build a :class:`RecurrentModel`.

    arch        "decoder" (a language model reading left to right) | "encoder-decoder"
    cell        "rnn" (tanh) | "lstm" | "gru"
    vocab_size  tokens
    d_model     token embedding size
    d_hidden    hidden state size (default d_model)
    n_layers    stacked cells (per stack)
    attention   encoder-decoder only: "none" (the decoder sees only the encoder's final state) |
                "additive" (Bahdanau et al. 2015)
    d_attn      additive attention's hidden size (default d_hidden)
    max_len     the longest example of the task it was built for (informational: a recurrent
                model runs on any length, ``max_positions`` is None)
    dropout     on the embeddings and between layers
    pad_id      padding token id (must come at the end of a row), None = no padding
    """

    arch: str = "decoder"
    cell: str = "lstm"
    vocab_size: int = 128
    d_model: int = 64
    d_hidden: int | None = None
    n_layers: int = 1
    attention: str = "none"
    d_attn: int | None = None
    max_len: int = 256
    dropout: float = 0.0
    pad_id: int | None = 0

    FORMAT_VERSION: ClassVar[int] = RECURRENT_FORMAT_VERSION
    WHAT: ClassVar[str] = "recurrent model config"
    FAMILY: ClassVar[str] = "recurrent"

    def __post_init__(self) -> None:
        if self.d_hidden is None:
            object.__setattr__(self, "d_hidden", self.d_model)
        if self.d_attn is None:
            object.__setattr__(self, "d_attn", self.d_hidden)
        _check_choice("arch", self.arch, ARCHS)
        _check_choice("cell", self.cell, tuple(CELLS))
        _check_choice("attention", self.attention, ATTENTIONS)
        _check_int("vocab_size", self.vocab_size, 2, 1_000_000)
        for name in ("d_model", "d_hidden", "d_attn"):
            _check_int(name, getattr(self, name), 1, 65_536)
        _check_int("n_layers", self.n_layers, 1, 64)
        _check_int("max_len", self.max_len, 1, 1_048_576)
        if self.attention != "none" and self.arch != "encoder-decoder":
            raise ValueError(f"attention={self.attention!r} needs arch='encoder-decoder': it is the "
                             "decoder attending over the encoder's states")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) \
                or not 0 <= self.dropout < 1:
            raise ValueError(f"dropout={self.dropout!r} must be a number in [0, 1)")
        if self.pad_id is not None:
            _check_int("pad_id", self.pad_id, 0)
            if self.pad_id >= self.vocab_size:
                raise ValueError(f"pad_id={self.pad_id} must be below vocab_size={self.vocab_size}")

    # ------------------------------------------------------------------ derived
    @property
    def max_positions(self) -> None:
        """Any length runs: no position table (order is the order of the steps)."""
        return None

    @property
    def causal(self) -> bool:
        return True

    @property
    def tie_embeddings(self) -> bool:
        """Never: the unembedding reads d_hidden (or [s; c]) numbers, not d_model."""
        return False

    @property
    def n_heads(self) -> int:
        """Attention heads: 1 for additive attention, 0 without attention."""
        return 1 if self.attention == "additive" else 0

    def min_parameters(self) -> int:
        """A lower bound on the parameter count: every layer holds at least its hidden-to-hidden
        matrix (d_hidden x d_hidden) and the model its token embedding (vocab x d_model)."""
        return self.n_layers * self.d_hidden ** 2 + self.vocab_size * self.d_model

    def summary(self) -> str:
        attn = ", additive attention" if self.attention == "additive" else (
            ", no attention" if self.arch == "encoder-decoder" else "")
        return (f"recurrent {self.arch}, {CELL_NAMES[self.cell]}, {self.n_layers} layer"
                f"{'s' if self.n_layers > 1 else ''}, d_model {self.d_model}, d_hidden "
                f"{self.d_hidden}{attn}")

    def lacks(self, view: str) -> str | None:
        """Why a view (``tfviz.model.families.VIEWS``) does not apply to this model, or None."""
        what = f"this {CELL_NAMES[self.cell]} model"
        if view == "self_attention":
            return (f"{what} has no self-attention: it reads the tokens one at a time and carries "
                    f"everything it knows in one hidden state of {self.d_hidden} numbers "
                    "(blocks.{l}.hook_hidden), so there are no heads or attention maps to show")
        if view == "cross_attention" and self.attention != "additive":
            return (f"{what} has no attention over the source: its decoder starts from the encoder's "
                    "final state and sees nothing else" if self.arch == "encoder-decoder" else
                    f"{what} is a decoder: there is no source to attend to")
        if view == "positions":
            return (f"{what} has no positional encoding: it reads the tokens in order, so the order "
                    "of the steps is the position")
        if view == "kv_cache":
            return (f"{what} keeps no key/value cache: between tokens it carries only its hidden "
                    "state, the same size however long the text")
        return None


# ---------------------------------------------------------------------------------- network
def top_hidden(state: State) -> torch.Tensor:
    """h of a layer's state [1, batch, d_hidden] (an LSTM's state is (h, c)) -> [batch, d_hidden]."""
    return (state[0] if isinstance(state, tuple) else state)[0]


def _keep(new: State, old: State, keep: torch.Tensor) -> State:
    """Rows with ``keep`` [batch] take the new state, the others keep the old one."""
    k = keep[None, :, None]
    if isinstance(new, tuple):
        return tuple(torch.where(k, n, o) for n, o in zip(new, old))
    return torch.where(k, new, old)


class RecurrentBlock(nn.Module):
    """One layer: a single-layer torch cell (a layer of its own, so its states can be recorded)."""

    def __init__(self, cfg: RecurrentConfig, d_in: int):
        super().__init__()
        self.rnn = CELLS[cfg.cell](d_in, cfg.d_hidden, batch_first=True)
        self.hook_hidden = HookPoint()
        self.hook_cell = HookPoint() if cfg.cell == "lstm" else None

    def forward(self, x: torch.Tensor, state: State | None = None,
                lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, State]:
        """x [batch, pos, d_in] -> (h [batch, pos, d_hidden], final state). ``lengths`` [batch]
        (on the CPU) for right-padded rows: the final state is each row's at its last real token
        and h is 0 after it."""
        if self.hook_cell is not None and self.hook_cell.active:
            out, cells, state = self.step_by_step(x, state, lengths)
            self.hook_cell(cells)
        elif lengths is not None:
            packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            out, state = self.rnn(packed, state)
            out = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0]
        else:
            out, state = self.rnn(x, state)
        return self.hook_hidden(out), state

    def step_by_step(self, x: torch.Tensor, state: State | None, lengths: torch.Tensor | None
                     ) -> tuple[torch.Tensor, torch.Tensor, State]:
        """The same computation one position at a time, also returning an LSTM's c_t
        [batch, pos, d_hidden] (torch's fused LSTM returns only the last c)."""
        B, T, _ = x.shape
        if state is None:
            zeros = x.new_zeros(1, B, self.rnn.hidden_size)
            state = (zeros, zeros) if isinstance(self.rnn, nn.LSTM) else zeros
        outs, cells = [], []
        for t in range(T):
            o, new = self.rnn(x[:, t:t + 1], state)
            if lengths is not None:
                keep = (t < lengths).to(x.device)
                new = _keep(new, state, keep)
                o = o * keep[:, None, None]
            state = new
            outs.append(o[:, 0])
            cells.append(state[1][0] if isinstance(state, tuple) else state[0])
        return torch.stack(outs, 1), torch.stack(cells, 1), state


class RecurrentStack(nn.Module):
    """n_layers blocks over the token embeddings (and, for a decoder with additive attention, the
    attention over the encoder's states, fed into the first layer at every step)."""

    def __init__(self, cfg: RecurrentConfig, cross: bool = False):
        super().__init__()
        self.cfg = cfg
        attend = cross and cfg.attention == "additive"
        d_in = cfg.d_model + (cfg.d_hidden if attend else 0)
        self.hook_embed = HookPoint()
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(RecurrentBlock(cfg, d_in if l == 0 else cfg.d_hidden)
                                    for l in range(cfg.n_layers))
        self.cross_attn = AdditiveAttention(cfg.d_hidden, cfg.d_hidden, cfg.d_attn) if attend else None
        self.d_out = cfg.d_hidden * (2 if attend else 1)  # [s_i; c_i] with attention

    def forward(self, emb: torch.Tensor, state: list[State] | None = None,
                lengths: torch.Tensor | None = None, memory: torch.Tensor | None = None,
                memory_is_pad: torch.Tensor | None = None) -> tuple[torch.Tensor, list[State]]:
        """emb [batch, pos, d_model] -> (out [batch, pos, d_out], each layer's final state)."""
        x = self.drop(self.hook_embed(emb))
        if self.cross_attn is not None:
            return self._attend(x, state, memory, memory_is_pad)
        states = []
        for l, block in enumerate(self.blocks):
            x, s = block(self.drop(x) if l else x, None if state is None else state[l], lengths)
            states.append(s)
        return x, states

    def _attend(self, x: torch.Tensor, state: list[State], memory: torch.Tensor,
                memory_is_pad: torch.Tensor | None) -> tuple[torch.Tensor, list[State]]:
        """The Bahdanau decoder, one position at a time: the query of step i is s_{i-1}."""
        keys = self.cross_attn.keys(memory)  # [batch, k_pos, d_attn]
        state = list(state)
        hidden = [[] for _ in self.blocks]
        cells = [[] for _ in self.blocks]
        scores, weights, context = [], [], []
        for t in range(x.shape[1]):
            e, a, c = self.cross_attn(top_hidden(state[-1]), keys, memory, memory_is_pad)
            h = torch.cat([x[:, t], c], dim=-1)[:, None]  # [batch, 1, d_model + d_hidden]
            for l, block in enumerate(self.blocks):
                h, state[l] = block.rnn(self.drop(h) if l else h, state[l])
                hidden[l].append(h[:, 0])
                if isinstance(state[l], tuple):
                    cells[l].append(state[l][1][0])
            scores.append(e)
            weights.append(a)
            context.append(c)
        for l, block in enumerate(self.blocks):  # record the whole sequence, once
            block.hook_hidden(torch.stack(hidden[l], 1))
            if block.hook_cell is not None and block.hook_cell.active:
                block.hook_cell(torch.stack(cells[l], 1))
        ctx = torch.stack(context, 1)  # [batch, q_pos, d_hidden]
        self.cross_attn.record(torch.stack(scores, 1), torch.stack(weights, 1), ctx)
        return torch.cat([torch.stack(hidden[-1], 1), ctx], dim=-1), state


@dataclass
class RecurrentCache:
    """What a recurrent model carries between generation steps (``model.new_cache()``, used by
    ``tfviz.model.decoding``): each layer's state — the same few numbers however long the text,
    where a transformer's KV cache grows with every token — plus, with additive attention, the
    encoded source it attends over."""

    state: list | None = None
    length: int = 0  # decoder positions fed so far
    memory: torch.Tensor | None = None
    memory_is_pad: torch.Tensor | None = None
    encoded: bool = False  # an encoder-decoder's source has been read

    @property
    def nbytes(self) -> int:
        tensors = [t for s in self.state or [] for t in (s if isinstance(s, tuple) else (s,))]
        tensors += [t for t in (self.memory,) if t is not None]
        return sum(t.numel() * t.element_size() for t in tensors)


class RecurrentModel(ModelAPI, nn.Module):
    def __init__(self, config: RecurrentConfig):
        super().__init__()
        cfg = self._take_config(config, RecurrentConfig, "RecurrentConfig")
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        if cfg.arch == "encoder-decoder":
            self.encoder = RecurrentStack(cfg)
            self.decoder = RecurrentStack(cfg, cross=True)
            d_out = self.decoder.d_out
        else:
            self.stack = RecurrentStack(cfg)
            d_out = self.stack.d_out
        self.unembed = nn.Linear(d_out, cfg.vocab_size, bias=False)
        self._hooks: dict[str, HookPoint] = name_hook_points(self)

    def new_cache(self) -> RecurrentCache:
        return RecurrentCache()

    # ------------------------------------------------------------------ inputs
    def _pads(self, tokens: torch.Tensor, padding_mask: torch.Tensor | None, what: str):
        """[batch, pos] True = padding (only at the end of a row), or None when there is none."""
        pads = find_padding(self.config, tokens, padding_mask)
        if pads is None:
            return None
        if bool((pads[:, :-1] & ~pads[:, 1:]).any()):
            raise ValueError(f"padding inside {what}: a recurrent network reads every token in "
                             "order, so padding may only come at the end of a row")
        if bool(pads.all(dim=1).any()):
            raise ValueError(f"a row of {what} is all padding: there is nothing to read")
        return pads

    def prepare(self, *inputs: torch.Tensor, padding_mask: torch.Tensor | None = None,
                cache: RecurrentCache | None = None) -> tuple[torch.Tensor | None, ...]:
        """Check the inputs and find the source's padding -> ``pads`` for ``forward``: (None,) for
        a decoder, (src pads [batch, src_pos] bool or None, None) for an encoder-decoder."""
        cfg = self.config
        inputs = check_arity(cfg, inputs)
        if cfg.arch == "encoder-decoder":
            src, tgt = inputs
            src_pads = None
            if cache is None or not cache.encoded:
                check_tokens(cfg, src, "src")
                src_pads = self._pads(src, padding_mask, "src")
            check_tokens(cfg, tgt, "tgt")
            return src_pads, None
        check_tokens(cfg, inputs[0], "tokens")
        return (None,)  # reading left to right, padding at the end changes nothing before it

    # ------------------------------------------------------------------ forward
    def forward(self, *inputs: torch.Tensor, padding_mask: torch.Tensor | None = None,
                cache: RecurrentCache | None = None, pads: tuple | None = None) -> torch.Tensor:
        """decoder: model(tokens); encoder-decoder: model(src, tgt) -> logits [batch, pos, vocab].
        With ``cache`` the inputs continue where the last call stopped (generation)."""
        if pads is None:
            pads = self.prepare(*inputs, padding_mask=padding_mask, cache=cache)
        state = None if cache is None else cache.state
        if self.config.arch == "encoder-decoder":
            src, tgt = inputs
            memory, memory_is_pad = (None, None) if cache is None else (cache.memory, cache.memory_is_pad)
            if cache is None or not cache.encoded:
                memory, state, memory_is_pad = self.encode(src, pads[0])
                if cache is not None:
                    cache.encoded = True
                    if self.decoder.cross_attn is not None:  # kept only where it is read again
                        cache.memory, cache.memory_is_pad = memory, memory_is_pad
            h, state = self.decoder(self.embed(tgt), state, None, memory, memory_is_pad)
        else:
            h, state = self.stack(self.embed(inputs[0]), state)  # right padding: read, then ignored
        if cache is not None:
            cache.state, cache.length = state, cache.length + h.shape[1]
        return self.unembed(h)  # [batch, pos, vocab]

    def encode(self, src: torch.Tensor, src_pads: torch.Tensor | None = None):
        """Encoder-decoder only: src [batch, src_pos] -> (memory [batch, src_pos, d_hidden], each
        layer's final state (at each row's last real token), src pads)."""
        if self.config.arch != "encoder-decoder":
            raise ValueError("encode() is for encoder-decoder models")
        lengths = None if src_pads is None else (~src_pads).sum(1).cpu()
        memory, state = self.encoder(self.embed(src), None, lengths)
        return memory, state, src_pads
