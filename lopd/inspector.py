"""Look inside the composer and the teacher for one task (``lopd inspect``).

For a task, its retrieved experiences and a student trajectory, ``inspect`` reports:

- what each latent token reads: the last compressor layer's cross-attention (heads averaged)
  over the rendered (task, experience) tokens -> top tokens per latent and the span around
  the most attended one;
- what each latent vector looks like: its nearest vocabulary tokens (cosine similarity to the
  rows of the input embedding matrix, top 5, decoded);
- the per-token privilege ``delta = log pi_T(a | s, c) - log pi_S(a | s)`` (eq. 11) on the
  trajectory's action tokens: teacher with the latent context vs the student as it stands.

Outputs: a rich terminal view (tokens coloured by delta), ``inspect.html`` (tokens with a
background colour, hover for the value), ``inspect.png`` (latent x experience-token attention
heat maps and the delta per action token) and ``inspect.json``, all under ``out_dir``.
Everything is computed without gradients; nothing is trained.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from lopd.batch import collate, gather_token_logprobs
from lopd.composer import Composer
from lopd.teacher import student_logits, teacher_logits
from lopd.types import Trajectory


@dataclass
class LatentRead:
    """What latent ``k`` of experience ``j`` attends to and resembles."""

    experience: int
    latent: int
    top_tokens: list[tuple[str, float]]
    span: str
    nearest: list[str]


@dataclass
class InspectReport:
    """Everything ``inspect`` found; arrays are numpy.

    attention  J arrays ``(K, T_j)``: cross-attention of each latent over pair j's tokens
    pair_tokens J lists of decoded tokens of the rendered pairs
    tokens     ``(T-1,)`` decoded predicted tokens of the trajectory (``input_ids[1:]``)
    deltas     ``(T-1,)`` teacher minus student log-prob, NaN where not an action token
    """

    experiences: list[str]
    reads: list[LatentRead]
    attention: list[np.ndarray]
    pair_tokens: list[list[str]]
    tokens: list[str]
    deltas: np.ndarray
    teacher_logp: np.ndarray
    student_logp: np.ndarray
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def mean_delta(self) -> float:
        values = self.deltas[~np.isnan(self.deltas)]
        return float(values.mean()) if values.size else math.nan


def _decode_each(tokenizer, ids: list[int]) -> list[str]:
    return [tokenizer.decode([i]) for i in ids]


def _nearest_tokens(latents: torch.Tensor, embedding: torch.Tensor, tokenizer, top: int):
    """``latents (C, d)`` -> C lists of the ``top`` decoded tokens by cosine similarity."""
    sims = torch.nn.functional.normalize(latents.float(), dim=-1) @ torch.nn.functional.normalize(
        embedding.float(), dim=-1
    ).T  # (C, V)
    best = sims.topk(top, dim=-1).indices.tolist()
    return [_decode_each(tokenizer, row) for row in best]


def _latent_reads(composed, tokenizer, embedding, top_tokens: int, window: int):
    """Per latent: top attended tokens, the span around the maximum, nearest vocabulary."""
    K = composed.attention.shape[1]  # (P, K, T_max)
    nearest = _nearest_tokens(composed.context[0], embedding, tokenizer, 5)
    reads, attention, pair_tokens = [], [], []
    for p, ids in enumerate(composed.pair_ids):
        j = int(composed.pair_slot[p])
        weights = composed.attention[p, :, : len(ids)].float().cpu()  # (K, T_j)
        attention.append(weights.numpy())
        tokens = _decode_each(tokenizer, ids)
        pair_tokens.append(tokens)
        for k in range(K):
            values, index = weights[k].topk(min(top_tokens, len(ids)))
            peak = int(index[0])
            span = tokenizer.decode(ids[max(peak - window, 0) : peak + window + 1])
            reads.append(LatentRead(
                experience=j, latent=k,
                top_tokens=[(tokens[i], float(v)) for v, i in zip(values, index.tolist())],
                span=span, nearest=nearest[j * K + k],
            ))
    return reads, attention, pair_tokens


def _privilege(model, trajectory, context, mask, pad_id, teacher_model, placement=None):
    """Teacher and student log-probs of the trajectory's tokens, ``(T-1,)`` each, + mask."""
    device = model.get_input_embeddings().weight.device
    batch = collate([trajectory], pad_id).to(device)
    teacher_batch = batch
    if placement is not None:  # where the latents go (lopd.framing)
        embed = (teacher_model or model).get_input_embeddings()
        teacher_batch, context, mask = placement.place(batch, context, mask, embed)
    t_logits = teacher_logits(model, teacher_batch, context, mask, teacher_model=teacher_model)
    s_logits = student_logits(model, batch)
    teacher = gather_token_logprobs(t_logits[:, :-1], batch.targets)[0]
    student = gather_token_logprobs(s_logits[:, :-1], batch.targets)[0]
    return teacher.cpu(), student.cpu(), batch.target_mask[0].cpu(), batch.targets[0].tolist()


def _color(delta: float, scale: float) -> tuple[int, int, int]:
    """Green for positive delta (teacher more confident), red for negative, white at 0."""
    if math.isnan(delta):
        return (235, 235, 235)
    x = max(-1.0, min(1.0, delta / scale))
    fade = int(255 * (1 - abs(x)))
    return (fade, 255, fade) if x > 0 else (255, fade, fade)


def _scale(deltas: np.ndarray) -> float:
    values = np.abs(deltas[~np.isnan(deltas)])
    return float(values.max()) if values.size and values.max() > 0 else 1.0


def print_terminal(report: InspectReport, console=None) -> None:
    """Rich view: experiences, what latents read, and the trajectory coloured by delta."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    for j, text in enumerate(report.experiences):
        console.print(f"[bold]experience {j}[/bold]: {text[:300]}")
    table = Table("j", "k", "top attended tokens", "nearest vocabulary", title="latent tokens")
    for read in report.reads:
        tops = " ".join(f"{t!r}:{w:.2f}" for t, w in read.top_tokens[:3])
        table.add_row(str(read.experience), str(read.latent), tops, " ".join(map(repr, read.nearest)))
    console.print(table)
    scale = _scale(report.deltas)
    line = Text()
    for token, delta in zip(report.tokens, report.deltas):
        r, g, b = _color(float(delta), scale)
        line.append(token, style=f"black on rgb({r},{g},{b})")
    console.print(f"[bold]privilege delta[/bold] (mean {report.mean_delta:+.3f}, scale {scale:.2f})")
    console.print(line)


def write_html(report: InspectReport, path: Path) -> Path:
    """Tokens with background colour by delta (hover shows the value), plus the latent table."""
    scale = _scale(report.deltas)
    spans = []
    for token, delta in zip(report.tokens, report.deltas):
        r, g, b = _color(float(delta), scale)
        title = "not supervised" if math.isnan(delta) else f"delta={delta:+.3f}"
        spans.append(f'<span style="background:rgb({r},{g},{b})" title="{title}">'
                     f"{html.escape(token)}</span>")
    rows = "".join(
        f"<tr><td>{r.experience}</td><td>{r.latent}</td>"
        f"<td>{html.escape(' '.join(repr(t) for t, _ in r.top_tokens))}</td>"
        f"<td>{html.escape(r.span)}</td><td>{html.escape(' '.join(map(repr, r.nearest)))}</td></tr>"
        for r in report.reads
    )
    exps = "".join(f"<li><pre>{html.escape(e)}</pre></li>" for e in report.experiences)
    path.write_text(
        "<!doctype html><meta charset='utf-8'><title>lopd inspect</title>"
        "<style>body{font-family:sans-serif} .traj{white-space:pre-wrap;font-family:monospace}"
        "td{border:1px solid #ccc;padding:2px 6px;font-size:12px}</style>"
        f"<h2>Retrieved experiences</h2><ol start='0'>{exps}</ol>"
        f"<h2>Privilege delta (mean {report.mean_delta:+.3f}; scale ±{scale:.2f})</h2>"
        f"<div class='traj'>{''.join(spans)}</div>"
        "<h2>Latent tokens</h2><table><tr><th>j</th><th>k</th><th>top tokens</th>"
        f"<th>span</th><th>nearest vocabulary</th></tr>{rows}</table>\n",
        encoding="utf-8",
    )
    return path


def _token_ticks(ax, tokens: list[str], most: int = 80) -> None:
    """Label the x axis with the decoded tokens when there are few enough to read."""
    if len(tokens) <= most:
        ax.set_xticks(range(len(tokens)))
        ax.set_xticklabels([repr(t)[1:-1] for t in tokens], rotation=90, fontsize=7)


def write_png(report: InspectReport, path: Path) -> Path:
    """Heat maps: latent x experience-token attention per experience; delta per action token."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(report.attention)
    fig, axes = plt.subplots(n + 1, 1, figsize=(14, 3.2 * (n + 1)), squeeze=False)
    for j, weights in enumerate(report.attention):
        ax = axes[j][0]
        image = ax.imshow(weights, aspect="auto", cmap="viridis")
        ax.set_title(f"experience {j}: latent x token cross-attention")
        ax.set_ylabel("latent k")
        _token_ticks(ax, report.pair_tokens[j])
        fig.colorbar(image, ax=ax)
    ax = axes[n][0]
    supervised = ~np.isnan(report.deltas)
    values = report.deltas[supervised]
    if values.size:
        scale = _scale(report.deltas)
        image = ax.imshow(values[None, :], aspect="auto", cmap="RdYlGn", vmin=-scale, vmax=scale)
        _token_ticks(ax, [t for t, keep in zip(report.tokens, supervised) if keep])
        fig.colorbar(image, ax=ax)
    ax.set_title("privilege delta per action token (teacher - student log-prob)")
    ax.set_yticks([])
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


@torch.no_grad()
def inspect(
    composer: Composer,
    model,
    tokenizer,
    task_text: str,
    experiences: list[str],
    trajectory: Trajectory,
    out_dir: str | Path | None = None,
    console=None,
    teacher_model=None,
    top_tokens: int = 5,
    window: int = 3,
    placement=None,
) -> InspectReport:
    """Compose, score and render one task (module docstring). ``console=False`` is silent."""
    composed = composer.compose_detailed([task_text], [list(experiences)], return_attention=True)
    embedding = model.get_input_embeddings().weight
    if composed.attention is None:
        raise ValueError("inspect needs at least one experience")
    reads, attention, pair_tokens = _latent_reads(composed, tokenizer, embedding, top_tokens,
                                                  window)
    pad_id = tokenizer.pad_token_id or 0
    teacher, student, mask, targets = _privilege(
        model, trajectory, composed.context, composed.mask, pad_id, teacher_model, placement
    )
    deltas = torch.where(mask, teacher - student, torch.tensor(float("nan"))).numpy()
    report = InspectReport(
        experiences=list(experiences), reads=reads, attention=attention,
        pair_tokens=pair_tokens, tokens=_decode_each(tokenizer, targets), deltas=deltas,
        teacher_logp=teacher.numpy(), student_logp=student.numpy(),
    )
    if console is not False:
        print_terminal(report, console)
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        report.files["html"] = write_html(report, out / "inspect.html")
        report.files["png"] = write_png(report, out / "inspect.png")
        report.files["json"] = _write_json(report, out / "inspect.json")
    return report


def _write_json(report: InspectReport, path: Path) -> Path:
    payload = {
        "experiences": report.experiences,
        "mean_delta": report.mean_delta,
        "latents": [r.__dict__ for r in report.reads],
        "tokens": report.tokens,
        "deltas": [None if math.isnan(d) else float(d) for d in report.deltas],
    }
    path.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
