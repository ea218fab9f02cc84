"""Built-in tiny decoders with random weights: the architecture, not the weights, decides the kernel stream.

Both models follow the eager Hugging Face code paths (LLaMA-style dense, Mixtral-style MoE) op for op where
it matters for kernel counts: an RMSNorm made of ``pow/mean/add/rsqrt/mul/mul``, separate q/k/v projections,
a KV cache grown with ``torch.cat``, ``scaled_dot_product_attention``, a gated SiLU MLP, and for the MoE a
router (softmax, top-k, renormalise) followed by a Python loop over the experts that gathers the tokens routed
to each expert, runs its MLP and ``index_add_``s the weighted result back.

This module imports torch at import time; import it lazily (``taxbreak.capture`` itself does not).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 - the conventional name

MODEL_KINDS = ("dense", "moe")


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of a built-in decoder. ``n_experts``/``top_k`` are used by the MoE model only."""

    kind: str = "dense"
    n_layers: int = 2
    hidden: int = 64
    n_heads: int = 4
    ffn_hidden: int = 128
    vocab: int = 256
    n_experts: int = 8
    top_k: int = 2
    expert_ffn_hidden: int = 64
    max_positions: int = 4096
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in MODEL_KINDS:
            raise ValueError(f"model kind must be one of {MODEL_KINDS}, not {self.kind!r}")
        if self.hidden % self.n_heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of n_heads ({self.n_heads})")
        if self.kind == "moe" and not 1 <= self.top_k <= self.n_experts:
            raise ValueError(f"top_k ({self.top_k}) must be in 1..n_experts ({self.n_experts})")

    def describe(self) -> str:
        base = f"{self.kind} L{self.n_layers} H{self.hidden} heads{self.n_heads} vocab{self.vocab}"
        if self.kind == "moe":
            return f"{base} experts{self.n_experts} top{self.top_k}"
        return base

    def as_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


class KVCache:
    """Per-layer key/value tensors, grown by concatenation as eager HF ``DynamicCache`` does."""

    def __init__(self, n_layers: int) -> None:
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers

    def length(self) -> int:
        k = self.keys[0]
        return 0 if k is None else int(k.shape[2])

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        old_k, old_v = self.keys[layer], self.values[layer]
        if old_k is not None and old_v is not None:
            k = torch.cat([old_k, k], dim=2)
            v = torch.cat([old_v, v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.hidden // cfg.n_heads
        self.q_proj = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
        self.k_proj = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
        self.v_proj = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
        self.o_proj = nn.Linear(cfg.hidden, cfg.hidden, bias=False)

    def forward(self, x: torch.Tensor, cache: KVCache) -> torch.Tensor:
        b, s, h = x.shape
        q = self.q_proj(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k, v = cache.update(self.layer, k, v)
        # Prefill (s > 1) is causal over the prompt; a decode step (s == 1) attends to the whole cache.
        out = F.scaled_dot_product_attention(q, k, v, is_causal=s > 1)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, h))


class MLP(nn.Module):
    def __init__(self, hidden: int, ffn_hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ffn_hidden, bias=False)
        self.up_proj = nn.Linear(hidden, ffn_hidden, bias=False)
        self.down_proj = nn.Linear(ffn_hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SparseMoE(nn.Module):
    """Top-k routed experts, looped in Python per expert (Mixtral/OLMoE eager style)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_experts = cfg.n_experts
        self.top_k = cfg.top_k
        self.gate = nn.Linear(cfg.hidden, cfg.n_experts, bias=False)
        self.experts = nn.ModuleList(MLP(cfg.hidden, cfg.expert_ffn_hidden) for _ in range(cfg.n_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        flat = x.view(-1, h)
        router_logits = self.gate(flat)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights = routing_weights / routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(flat.dtype)
        out = torch.zeros_like(flat)
        expert_mask = F.one_hot(selected, num_classes=self.n_experts).permute(2, 1, 0)
        for expert_idx in range(self.n_experts):
            idx, top_x = torch.where(expert_mask[expert_idx])
            if top_x.numel() == 0:
                continue
            current = flat[top_x]
            current = self.experts[expert_idx](current) * routing_weights[top_x, idx, None]
            out.index_add_(0, top_x, current)
        return out.view(b, s, h)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.input_norm = RMSNorm(cfg.hidden)
        self.attn = Attention(cfg, layer)
        self.post_norm = RMSNorm(cfg.hidden)
        self.mlp: nn.Module = SparseMoE(cfg) if cfg.kind == "moe" else MLP(cfg.hidden, cfg.ffn_hidden)

    def forward(self, x: torch.Tensor, cache: KVCache) -> torch.Tensor:
        x = x + self.attn(self.input_norm(x), cache)
        return x + self.mlp(self.post_norm(x))


class TinyDecoder(nn.Module):
    """Embedding, ``n_layers`` decoder layers, final RMSNorm, LM head. ``forward`` returns logits."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.hidden)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)

    def new_cache(self) -> KVCache:
        return KVCache(self.cfg.n_layers)

    def forward(self, input_ids: torch.Tensor, cache: KVCache) -> torch.Tensor:
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x, cache)
        return self.lm_head(self.norm(x))


def build_model(cfg: ModelConfig, *, dtype: torch.dtype = torch.float32, device: str = "cpu") -> TinyDecoder:
    """A ``TinyDecoder`` with seeded random weights (scaled so that logits stay finite in low precision)."""
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(cfg.seed)
    try:
        model = TinyDecoder(cfg)
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() > 1:
                    p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]))
    finally:
        torch.random.set_rng_state(gen_state)
    return model.to(device=device, dtype=dtype).eval()
