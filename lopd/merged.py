"""A merged view of a LoRA student for decoding: base + adapter as one plain model.

A PEFT LoRA linear runs the base product plus the adapter's own (dropout, A, B, scale, add):
for a 135M model decoding a few rows on a CPU, those small extra operations on every
attention and MLP linear of every layer are a large share of a forward
(``benchmarks/results/merged_decode.md``). ``MergedStudent`` builds a plain transformers module
tree that shares every tensor of the PEFT model's base (embeddings, norms, rotary buffers,
untargeted linears) and gives each LoRA-targeted linear its own weight ``W + s * B @ A``
(PEFT's ``get_delta_weight``). Decoding with it computes the student's function up to float
rounding; greedy rollouts match the unmerged model's (``tests/test_merged.py``).

The PEFT model is never modified: no merge / unmerge, so the frozen base (the teacher and the
composer's encoder read it) carries no rounding drift. ``sync()`` recomputes the merged weights
when the adapter's parameters changed in place (an optimizer step, a resume), a few rank-r
products. Cost: one extra copy of the targeted linear weights (about 400 MB for SmolLM2 in
fp32). Not for DoRA or other layer kinds: ``MergedStudent.supported`` says whether it applies.
"""

from __future__ import annotations

import copy

import torch


def _lora_layers(peft_model) -> dict[str, torch.nn.Module]:
    """Path (in the base model) -> PEFT LoRA layer, for every layer wrapping a linear."""
    from peft.tuners.lora import LoraLayer

    base = peft_model.get_base_model()
    return {name: module for name, module in base.named_modules() if isinstance(module, LoraLayer)}


def _clone_tree(module: torch.nn.Module, replace: dict[str, torch.nn.Module], prefix: str = ""):
    """A new module tree over the same tensors, with ``replace[path]`` at those paths."""
    if prefix in replace:
        return replace[prefix]
    clone = copy.copy(module)
    clone.__dict__["_parameters"] = dict(module._parameters)
    clone.__dict__["_buffers"] = dict(module._buffers)
    clone.__dict__["_modules"] = {
        name: None if child is None else _clone_tree(child, replace, f"{prefix}.{name}" if prefix else name)
        for name, child in module._modules.items()}
    return clone


class MergedStudent:
    """A plain model computing ``peft_model`` with ``adapter`` active, for generation only."""

    def __init__(self, peft_model, adapter: str):
        self.peft_model = peft_model
        self.adapter = adapter
        self.layers = _lora_layers(peft_model)
        replace = {}
        for path, layer in self.layers.items():
            base_linear = layer.get_base_layer()
            linear = _clone_tree(base_linear, {})
            linear.weight = torch.nn.Parameter(base_linear.weight.detach().clone(), requires_grad=False)
            replace[path] = linear
        self.model = _clone_tree(peft_model.get_base_model(), replace)
        self.model.eval()
        self.linears = replace
        self._version: int | None = None
        self.sync()

    @staticmethod
    def supported(peft_model, adapter: str) -> bool:
        """True where every LoRA layer is a plain linear LoRA with ``adapter`` (no DoRA)."""
        if not hasattr(peft_model, "get_base_model"):
            return False
        layers = _lora_layers(peft_model)
        return bool(layers) and all(
            isinstance(layer.get_base_layer(), torch.nn.Linear) and adapter in layer.lora_A
            and not (getattr(layer, "use_dora", {}) or {}).get(adapter, False)
            for layer in layers.values())

    def _adapter_version(self) -> int:
        return sum(layer.lora_A[self.adapter].weight._version + layer.lora_B[self.adapter].weight._version
                   for layer in self.layers.values())

    @torch.no_grad()
    def sync(self) -> torch.nn.Module:
        """Recompute the merged weights if the adapter changed; returns the plain model."""
        version = self._adapter_version()
        if version != self._version:
            for path, layer in self.layers.items():
                base = layer.get_base_layer().weight
                self.linears[path].weight.copy_(base + layer.get_delta_weight(self.adapter).to(base.dtype))
            self._version = version
        return self.model
