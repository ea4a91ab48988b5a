"""The experience composer: LoRA encoder + QFormer-style compressor -> latent tokens (eq. 5-6).

``H_j = Enc_psi(x, m_j)`` (eq. 5): the frozen backbone with its own LoRA adapter ``psi``
(PEFT adapter ``"composer"`` on the *same* base model the student and teacher use, so one copy
of the weights is shared) runs on the rendered pair (task, experience) and returns its final
hidden states ``(T_j, d)``. ``E_j = Comp_chi(H_j; Q_chi)`` (eq. 6): ``K`` learned queries go
through ``n_layers`` pre-norm blocks of [self-attention over queries, cross-attention
queries -> encoder states (padding masked), MLP], then a projection into the backbone's
embedding space. The latent context of a task is ``c = concat_j E_j`` -> ``(J*K, d)``.

Scale. Each latent vector is rescaled to the mean L2 norm of the rows of the backbone's input
embedding matrix (``target_norm``, computed once at construction, saved with the weights), so
the teacher sees inputs of in-distribution magnitude; only the direction is learned
(``latent_scale="embedding_norm"``). ``latent_scale="layernorm"`` (the authors' code) returns
``LayerNorm(proj(queries))`` as is.

Blocks. ``block="independent"`` (default): ``n_layers`` QFormer-style blocks with their own
weights. ``block="shared"`` (the authors' code): a Perceiver resampler, one ``ResamplerBlock``
(the latents attend to ``[encoder states ; latents]``, then a bias-free MLP) applied
``n_layers`` times with shared weights, queries initialised ``randn / sqrt(d)``.

Batching and masks. ``compose`` encodes every (task, experience) pair of a step in one padded
encoder forward. Tasks may have different numbers of experiences: ``J`` is the largest count,
missing slots are zeros with ``mask == False`` (the teacher drops them; a task with no
experience gets no context at all). Each task is composed once; ``expand_for_groups`` shares the
result across the G rollouts of its group.

Parameters ``phi = (psi, chi)``: ``trainable_parameters()`` = the composer adapter's LoRA
tensors + the compressor. Only the compressor is an ``nn.Module`` child; the backbone is held by
reference, and the LoRA tensors are added to ``state_dict`` under ``lora.`` (names without the
adapter name, so weights move between adapter names). ``Composer.requires_grad_(False)``
freezes the compressor, and the encoder pass then also keeps psi frozen (frozen-composer
ablation). With ``encoder_lora=False`` the encoder is the plain frozen backbone (adapters
disabled when the model is a PeftModel) and runs without gradient.

Simplifications: the pair is one ChatML user message ``Task: ...\\nExperience: ...`` cut to
``max_pair_tokens`` from the experience's end; attention weights returned for inspection are the
last layer's cross-attention averaged over heads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

from lopd.models import LoraSpec, add_adapter
from lopd.teacher import adapters_disabled, decoder_hidden_states, is_peft, keep_requires_grad

_WEIGHTS, _CONFIG = "composer.safetensors", "composer.json"


@dataclass
class ComposerConfig:
    num_queries: int = 32
    """K: learned queries, i.e. latent tokens per experience (paper default 32)."""
    n_layers: int = 2
    """Compressor blocks (self-attention, cross-attention, MLP)."""
    n_heads: int = 0
    """Attention heads of the compressor; 0 = the backbone's head count (or 1 if it does not
    divide the hidden size)."""
    mlp_ratio: float = 4.0
    """Hidden width of the compressor MLP as a multiple of d."""
    max_pair_tokens: int = 512
    """Token budget of one rendered (task, experience) pair; the experience is cut first."""
    query_init_std: float = 0.02
    """Standard deviation of the initial learned queries (``shared``: 1 / sqrt(d))."""
    block: str = "independent"
    """independent: ``n_layers`` blocks with their own weights; shared: one Perceiver-style
    resampler block applied ``n_layers`` times (the authors' compressor)."""
    latent_scale: str = "embedding_norm"
    """embedding_norm: each latent rescaled to ``target_norm``; layernorm: LayerNorm of the
    output projection, no rescaling (the authors')."""
    encoder_lora: bool = True
    """Give the encoder its own LoRA adapter psi; False = plain frozen backbone."""
    adapter_name: str = "composer"
    """PEFT adapter name of psi on the shared base model."""
    lora: LoraSpec = field(default_factory=LoraSpec)
    """Shape of psi."""

    @classmethod
    def from_dict(cls, data: dict) -> ComposerConfig:
        data = dict(data)
        lora = data.pop("lora", {})
        if "target_modules" in lora:
            lora["target_modules"] = tuple(lora["target_modules"])
        return cls(**data, lora=LoraSpec(**lora))


def render_pair(tokenizer, task_text: str, experience_text: str, max_tokens: int) -> list[int]:
    """Token ids of the encoder input for one (task, experience) pair, at most ``max_tokens``.

    A ChatML user message ``Task: {task}\\nExperience: {experience}`` (plain text for non-ChatML
    tokenizers). Over budget, the experience is cut from its end, then the task if need be.
    """
    markers = tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    chatml = all(i is not None and i != tokenizer.unk_token_id for i in markers)
    head_text, tail_text = ("<|im_start|>user\n", "<|im_end|>\n") if chatml else ("", "")

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    head, tail = encode(head_text), encode(tail_text)
    task, middle = encode(f"Task: {task_text}"), encode("\nExperience: ")
    experience = encode(experience_text)
    room = max_tokens - len(head) - len(tail) - len(middle)
    task = task[: max(room, 0)]
    experience = experience[: max(room - len(task), 0)]
    return (head + task + middle + experience + tail)[:max_tokens]


def _head_count(d: int, wanted: int) -> int:
    return wanted if wanted > 0 and d % wanted == 0 else 1


class CompressorBlock(nn.Module):
    """Pre-norm [self-attn over queries, cross-attn queries -> memory, MLP], residual each."""

    def __init__(self, d: int, n_heads: int, mlp_ratio: float):
        super().__init__()
        hidden = int(d * mlp_ratio)
        self.norm_self = nn.LayerNorm(d)
        self.self_attn = nn.MultiheadAttention(d, n_heads, batch_first=True)
        self.norm_query = nn.LayerNorm(d)
        self.norm_memory = nn.LayerNorm(d)
        self.cross_attn = nn.MultiheadAttention(d, n_heads, batch_first=True)
        self.norm_mlp = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))

    def forward(
        self, queries: torch.Tensor, memory: torch.Tensor, memory_pad: torch.Tensor,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``queries (P, K, d)``, ``memory (P, T, d)``, ``memory_pad (P, T)`` True = padding.

        Returns the new queries and, if asked, cross-attention weights ``(P, K, T)``.
        """
        x = self.norm_self(queries)
        queries = queries + self.self_attn(x, x, x, need_weights=False)[0]
        kv = self.norm_memory(memory)
        attended, weights = self.cross_attn(
            self.norm_query(queries), kv, kv, key_padding_mask=memory_pad,
            need_weights=need_weights, average_attn_weights=True,
        )
        queries = queries + attended
        queries = queries + self.mlp(self.norm_mlp(queries))
        return queries, weights


class ResamplerBlock(nn.Module):
    """Perceiver-resampler block: the latents attend to ``[memory ; latents]``, then a
    bias-free MLP; pre-norm, residual each (the authors' compressor block)."""

    def __init__(self, d: int, n_heads: int, mlp_ratio: float):
        super().__init__()
        hidden = int(d * mlp_ratio)
        self.norm_memory = nn.LayerNorm(d)
        self.norm_latents = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, n_heads, batch_first=True, bias=False)
        self.norm_mlp = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, hidden, bias=False), nn.GELU(),
                                 nn.Linear(hidden, d, bias=False))

    def forward(
        self, queries: torch.Tensor, memory: torch.Tensor, memory_pad: torch.Tensor,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """As ``CompressorBlock.forward``; the weights returned cover the memory part only."""
        latents = self.norm_latents(queries)
        kv = torch.cat([self.norm_memory(memory), latents], dim=1)  # (P, T + K, d)
        pad = torch.cat([memory_pad, memory_pad.new_zeros(queries.shape[:2])], dim=1)
        attended, weights = self.attn(latents, kv, kv, key_padding_mask=pad,
                                      need_weights=need_weights, average_attn_weights=True)
        queries = queries + attended
        queries = queries + self.mlp(self.norm_mlp(queries))
        if weights is not None:
            weights = weights[..., : memory.shape[1]]
        return queries, weights


class Compressor(nn.Module):
    """Compressor chi: ``H (P, T, d_model) -> E (P, K, d_embed)``.

    ``block="independent"``: QFormer-style, ``n_layers`` blocks of their own; ``"shared"``: one
    ``ResamplerBlock`` applied ``n_layers`` times. ``latent_scale="embedding_norm"``: each latent
    rescaled to L2 norm ``target_norm``; ``"layernorm"``: ``LayerNorm(proj(.))`` as is.
    """

    def __init__(
        self, d_model: int, d_embed: int, num_queries: int, n_layers: int, n_heads: int,
        mlp_ratio: float, query_init_std: float, target_norm: float,
        block: str = "independent", latent_scale: str = "embedding_norm",
    ):
        super().__init__()
        if block not in ("independent", "shared"):
            raise ValueError(f"compressor block must be independent or shared, got {block!r}")
        if latent_scale not in ("embedding_norm", "layernorm"):
            raise ValueError(f"latent_scale must be embedding_norm or layernorm, got {latent_scale!r}")
        self.block_kind, self.latent_scale, self.n_layers = block, latent_scale, n_layers
        std = d_model ** -0.5 if block == "shared" else query_init_std
        self.queries = nn.Parameter(torch.randn(num_queries, d_model) * std)
        if block == "shared":
            self.blocks = nn.ModuleList([ResamplerBlock(d_model, n_heads, mlp_ratio)])
        else:
            self.blocks = nn.ModuleList(
                CompressorBlock(d_model, n_heads, mlp_ratio) for _ in range(n_layers)
            )
        self.norm_out = nn.LayerNorm(d_model if latent_scale == "embedding_norm" else d_embed)
        self.proj = nn.Linear(d_model, d_embed)
        self.register_buffer("target_norm", torch.tensor(float(target_norm)))

    def _schedule(self) -> list[nn.Module]:
        """The block applied at each layer (the one shared block ``n_layers`` times)."""
        return list(self.blocks) if self.block_kind == "independent" else [self.blocks[0]] * self.n_layers

    def forward(
        self, memory: torch.Tensor, memory_pad: torch.Tensor, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Latents ``(P, K, d_embed)`` and the last layer's cross-attention weights."""
        queries = self.queries.unsqueeze(0).expand(memory.shape[0], -1, -1)  # (P, K, d)
        weights = None
        schedule = self._schedule()
        for index, block in enumerate(schedule):
            last = index == len(schedule) - 1
            queries, weights = block(queries, memory, memory_pad, need_weights and last)
        if self.latent_scale == "layernorm":
            return self.norm_out(self.proj(queries)), weights
        latents = self.proj(self.norm_out(queries))
        scale = self.target_norm / latents.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        return latents * scale, weights


@contextmanager
def use_adapter(model, adapter_name: str, trainable: Sequence[nn.Parameter] = ()):
    """Activate PEFT adapter ``adapter_name`` inside the block; restore the previous one after.

    PEFT's ``set_adapter`` flips ``requires_grad`` (active adapter on, others off); the flags
    are restored to what they were and ``trainable`` is kept requiring grad, so switching
    adapters never silently freezes the student or the composer (``keep_requires_grad``).
    """
    previous = model.active_adapter
    with keep_requires_grad(model, trainable) as restore:
        model.set_adapter(adapter_name)
        restore()
        try:
            yield model
        finally:
            model.set_adapter(previous)


@dataclass
class ComposedContext:
    """Everything ``compose_detailed`` computes (the inspector reads the extras).

    context     (n, J*K, d) latent context per task      mask      (n, J*K) bool
    pair_task   (P,) task index of each encoded pair      pair_slot (P,) its experience slot j
    pair_ids    P token-id lists of the rendered pairs
    attention   (P, K, T_max) last-layer cross-attention, or None
    """

    context: torch.Tensor
    mask: torch.Tensor
    pair_task: torch.Tensor
    pair_slot: torch.Tensor
    pair_ids: list[list[int]]
    attention: torch.Tensor | None = None


class Composer(nn.Module):
    """phi = (psi, chi): LoRA encoder + compressor over a shared backbone (module docstring)."""

    def __init__(self, model, tokenizer, config: ComposerConfig | None = None):
        super().__init__()
        self.config = config = config or ComposerConfig()
        self.tokenizer = tokenizer
        if config.encoder_lora:
            if is_peft(model):  # keep the student's adapter trainable
                with keep_requires_grad(model):
                    add_adapter(model, config.adapter_name, config.lora)
            else:  # wraps a plain model; PEFT freezes its weights
                model = add_adapter(model, config.adapter_name, config.lora)
        self._model = [model]  # a list, so the backbone is not registered as a child
        embedding = model.get_input_embeddings().weight  # (V, d)
        target_norm = embedding.detach().float().norm(dim=-1).mean().item()
        d_model = model.config.hidden_size
        heads = config.n_heads or getattr(model.config, "num_attention_heads", 1)
        self.compressor = Compressor(
            d_model, embedding.shape[1], config.num_queries, config.n_layers,
            _head_count(d_model, heads), config.mlp_ratio, config.query_init_std, target_norm,
            block=config.block, latent_scale=config.latent_scale,
        ).to(embedding.device)
        for param in self.lora_parameters().values():
            param.requires_grad_(True)

    @property
    def model(self):
        """The shared backbone (a PeftModel when ``encoder_lora``: use it for the student too)."""
        return self._model[0]

    @property
    def target_norm(self) -> float:
        return float(self.compressor.target_norm)

    def lora_parameters(self) -> dict[str, nn.Parameter]:
        """psi: the composer adapter's tensors, keyed by name without the adapter name."""
        if not self.config.encoder_lora:
            return {}
        tag = f".{self.config.adapter_name}."
        return {
            name.replace(tag, "."): param
            for name, param in self.model.named_parameters()
            if "lora_" in name and tag in name
        }

    def trainable_parameters(self) -> list[nn.Parameter]:
        """phi = psi (LoRA) + chi (compressor), for the optimiser."""
        return list(self.lora_parameters().values()) + list(self.compressor.parameters())

    # --- state: compressor via nn.Module, LoRA tensors added under "lora." -----------------
    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for name, param in self.lora_parameters().items():
            destination[f"{prefix}lora.{name}"] = param if keep_vars else param.detach()

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        lora = self.lora_parameters()
        tag = f"{prefix}lora."
        for name, param in lora.items():
            if tag + name in state_dict:
                with torch.no_grad():
                    param.copy_(state_dict[tag + name])
            elif strict:
                missing_keys.append(tag + name)
        rest = {k: v for k, v in state_dict.items() if not k.startswith(tag)}
        unexpected_keys.extend(k for k in state_dict if k.startswith(tag) and k[len(tag):] not in lora)
        super()._load_from_state_dict(rest, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)

    def save(self, directory: str | Path) -> Path:
        """Write ``composer.safetensors`` (psi + chi) and ``composer.json`` (the config) into
        ``directory`` atomically: staged under a temporary name, flushed, then renamed, so a
        kill mid-write leaves the previous directory (or none), never a truncated file."""
        from safetensors.torch import save_file

        from lopd.atomic import staged_dir

        tensors = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        with staged_dir(directory) as tmp:
            save_file(tensors, str(tmp / _WEIGHTS))
            (tmp / _CONFIG).write_text(json.dumps(asdict(self.config), indent=2) + "\n")
        return Path(directory)

    def load(self, directory: str | Path) -> Composer:
        """Load weights written by ``save`` into this composer (same config shape). A missing
        or unreadable weights file raises ``DamagedRunFile`` naming it."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        from lopd.atomic import DamagedRunFile

        path = Path(directory) / _WEIGHTS
        try:
            weights = load_file(str(path))
        except FileNotFoundError:
            raise DamagedRunFile(f"{path} is missing") from None
        except (SafetensorError, OSError, ValueError) as error:
            raise DamagedRunFile(f"{path} is damaged ({error})") from None
        self.load_state_dict(weights)
        return self

    @classmethod
    def from_pretrained(cls, directory: str | Path, model, tokenizer, **overrides) -> Composer:
        """Build a composer from ``composer.json`` on ``model`` and load its weights."""
        data = json.loads((Path(directory) / _CONFIG).read_text())
        config = ComposerConfig.from_dict({**data, **overrides})
        return cls(model, tokenizer, config).load(directory)

    def frozen_copy(self, adapter_name: str = "composer_anchor") -> Composer:
        """A frozen twin with the current weights (e.g. phi_0 for the anchor term of eq. 13),
        on the same backbone under its own adapter name. Its output never needs gradient:
        compose it under ``torch.no_grad()`` (or cache it per (task, experiences))."""
        config = ComposerConfig.from_dict({**asdict(self.config), "adapter_name": adapter_name})
        twin = Composer(self.model, self.tokenizer, config)
        twin.load_state_dict(self.state_dict())
        return twin.requires_grad_(False).eval()

    # --- encoding ---------------------------------------------------------------------------
    def requires_grad_(self, requires_grad: bool = True) -> Composer:
        """Freeze or unfreeze all of phi (compressor and LoRA psi)."""
        super().requires_grad_(requires_grad)
        for param in self.lora_parameters().values():
            param.requires_grad_(requires_grad)
        return self

    def _encoder_scope(self):
        """psi active (kept trainable unless the composer is frozen), or the plain backbone."""
        model = self.model
        if self.config.encoder_lora:
            train_psi = self.compressor.queries.requires_grad
            params = list(self.lora_parameters().values()) if train_psi else []
            return use_adapter(model, self.config.adapter_name, params)
        stack = ExitStack()
        stack.enter_context(adapters_disabled(model))
        stack.enter_context(torch.no_grad())
        return stack

    def encode(self, pair_ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder states ``H (P, T_max, d)`` fp32 and padding ``(P, T_max)`` bool (True = pad)."""
        device = self.compressor.queries.device
        width = max(len(ids) for ids in pair_ids)
        pad_id = self.tokenizer.pad_token_id or 0
        ids = torch.full((len(pair_ids), width), pad_id, dtype=torch.long, device=device)
        attention = torch.zeros_like(ids)
        for row, row_ids in enumerate(pair_ids):
            ids[row, : len(row_ids)] = torch.tensor(row_ids, device=device)
            attention[row, : len(row_ids)] = 1
        with self._encoder_scope():
            embeds = self.model.get_input_embeddings()(ids)
            hidden = decoder_hidden_states(self.model, embeds, attention)
        return hidden.float(), attention == 0

    def compose_detailed(
        self, task_texts: list[str], experiences: list[list[str]], return_attention: bool = False
    ) -> ComposedContext:
        """Compose every task's latent context in one encoder forward (see ``compose``)."""
        if len(task_texts) != len(experiences):
            raise ValueError("need one experience list per task")
        n_tasks, K = len(task_texts), self.config.num_queries
        J = max((len(e) for e in experiences), default=0)
        d = self.compressor.proj.out_features
        device = self.compressor.queries.device
        pairs = [(i, j) for i, exps in enumerate(experiences) for j in range(len(exps))]
        pair_ids = [
            render_pair(self.tokenizer, task_texts[i], experiences[i][j],
                        self.config.max_pair_tokens)
            for i, j in pairs
        ]
        pair_task = torch.tensor([i for i, _ in pairs], dtype=torch.long, device=device)
        pair_slot = torch.tensor([j for _, j in pairs], dtype=torch.long, device=device)
        grid = torch.zeros(n_tasks, J, K, d, device=device)  # (n, J, K, d)
        present = torch.zeros(n_tasks, J, dtype=torch.bool, device=device)
        attention = None
        if pairs:
            hidden, pad = self.encode(pair_ids)
            latents, attention = self.compressor(hidden, pad, need_weights=return_attention)
            grid = grid.index_put((pair_task, pair_slot), latents.to(grid.dtype))
            present[pair_task, pair_slot] = True
        mask = present[:, :, None].expand(n_tasks, J, K).reshape(n_tasks, J * K)
        return ComposedContext(grid.reshape(n_tasks, J * K, d), mask, pair_task, pair_slot,
                               pair_ids, attention)

    def compose(
        self, task_texts: list[str], experiences: list[list[str]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``context (n_tasks, J*K, d)`` and ``mask (n_tasks, J*K)`` bool (False = empty slot).

        ``J`` = the largest number of experiences of any task; slot ``j`` of task ``i`` holds
        ``context[i, j*K:(j+1)*K]``. Differentiable w.r.t. ``trainable_parameters()``.
        """
        out = self.compose_detailed(task_texts, experiences)
        return out.context, out.mask

    def forward(self, task_texts: list[str], experiences: list[list[str]]):
        return self.compose(task_texts, experiences)


def latent_diversity(latents: torch.Tensor) -> dict[str, float]:
    """How much a composer's output varies: ``latents (P, K, d)``, the K latents of P encoded
    (task, experience) pairs. ``within``: mean cosine between two latents of one pair;
    ``across``: mean cosine between latent k of two different pairs. Both near 1 is a composer
    whose context ignores its input, a learned soft prompt (one vector repeated J*K times).
    NaN where a count is below 2."""
    e = torch.nn.functional.normalize(latents.detach().float(), dim=-1)

    def mean_off_diagonal(gram: torch.Tensor) -> float:
        n = gram.shape[-1]
        if n < 2:
            return float("nan")
        off = ~torch.eye(n, dtype=torch.bool, device=gram.device)
        return float(gram[..., off].mean())

    return {"within": mean_off_diagonal(e @ e.transpose(1, 2)),
            "across": mean_off_diagonal(e.transpose(0, 1) @ e.transpose(0, 1).transpose(1, 2))}


def expand_for_groups(
    context: torch.Tensor, mask: torch.Tensor, group_index: torch.Tensor | list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Share each task's context across its rollouts.

    ``context (n, C, d)``, ``mask (n, C)``, ``group_index (B,)`` = the task (row of
    ``context``) of every trajectory -> ``(B, C, d)``, ``(B, C)``. Gradients of all rollouts of
    a group add up in the one composed context.
    """
    index = torch.as_tensor(group_index, dtype=torch.long, device=context.device)
    return context.index_select(0, index), mask.index_select(0, index)
