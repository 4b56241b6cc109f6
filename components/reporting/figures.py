"""The report's drawings, with matplotlib's Agg backend: training curves, the confusion matrix."""

from __future__ import annotations

import base64
import io

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bakeoff.components.storage.records import VAL_EPOCHS

# Per-epoch series of a metrics.json history: (panel, its training key, its validation key).
PANELS = (("loss", "loss", "val_loss"), ("accuracy", "accuracy", "val_accuracy"))


def curves(histories: dict[str, dict]) -> Figure:
    """Every candidate's training (solid) and validation (dashed, at its validated epochs) curves, loss and accuracy.

    A history without validation keys (older metrics.json) draws its training curves only.
    """
    figure = Figure(figsize=(11, 4), layout="constrained")
    axes = figure.subplots(1, len(PANELS))
    colours = [f"C{i % 10}" for i in range(len(histories))]
    for ax, (panel, train_key, val_key) in zip(axes, PANELS, strict=True):
        for colour, (variant, history) in zip(colours, histories.items(), strict=True):
            train = history.get(train_key, [])
            ax.plot(
                range(1, len(train) + 1),
                train,
                color=colour,
                marker=".",
                label=f"{variant} train",
                gid=f"{variant}/{train_key}",
            )
            validation = history.get(val_key, [])
            if validation:
                epochs = history.get(VAL_EPOCHS) or list(range(1, len(validation) + 1))
                ax.plot(
                    epochs,
                    validation,
                    color=colour,
                    linestyle="--",
                    marker="o",
                    label=f"{variant} validation",
                    gid=f"{variant}/{val_key}",
                )
        ax.set(title=panel, xlabel="epoch")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize="small", loc="best")
    return figure


def series(figure: Figure) -> dict[str, dict[str, list[float]]]:
    """The points drawn, by line id (``variant/key``): what the report embeds beside each curve image."""
    return {
        gid: {
            "epoch": np.asarray(line.get_xdata(), float).tolist(),
            "value": np.asarray(line.get_ydata(), float).tolist(),
        }
        for ax in figure.axes
        for line in ax.get_lines()
        if (gid := line.get_gid())
    }


def confusion(matrix: list[list[int]], class_names: list[str]) -> Figure:
    """The confusion matrix as a heat map: true class down, predicted class across, every count written in."""
    counts = np.asarray(matrix)
    figure = Figure(figsize=(7.5, 6.5), layout="constrained")
    ax = figure.subplots()
    image = ax.imshow(counts, cmap="Blues")
    figure.colorbar(image, ax=ax, shrink=0.8)
    ticks = range(len(class_names))
    ax.set_xticks(ticks, class_names, rotation=45, ha="right")
    ax.set_yticks(ticks, class_names)
    ax.set(xlabel="predicted", ylabel="true")
    dark = counts.max() / 2 if counts.size else 0
    for (row, column), count in np.ndenumerate(counts):
        ax.text(
            column, row, str(count), ha="center", va="center", fontsize=8, color="white" if count > dark else "black"
        )
    return figure


def png_base64(figure: Figure) -> str:
    """The figure as a base64 PNG, for a data: URI."""
    buffer = io.BytesIO()
    FigureCanvasAgg(figure)  # no pyplot: no global state, no display needed
    figure.savefig(buffer, format="png", dpi=100)
    return base64.b64encode(buffer.getvalue()).decode("ascii")
