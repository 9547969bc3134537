"""The one place figures become PNG files: atomic writes to any filesystem, labels kept in the file.

`save_figure(fig, path)` writes the PNG through base/fileio (a temporary file beside it, then a
rename; `gs://` and `ram://` paths work) and stores every axes' title, x/y labels and legend
entries as a PNG text chunk, so `png_labels(path)` can check, from the file alone, that a plot
has labelled axes and a legend.
"""
import io
import json

LABELS_KEY = "convbert:axes"


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend (no screen on servers and CI)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def axes_labels(fig):
    """[{title, xlabel, ylabel, legend}] for every axes of `fig` that draws something."""
    out = []
    for ax in fig.get_axes():
        legend = ax.get_legend()
        out.append({"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
                    "legend": [t.get_text() for t in legend.get_texts()] if legend else []})
    return out


def save_figure(fig, path, dpi=110):
    """`fig` as a PNG at `path` (atomic, any filesystem), then closed."""
    from base import fileio
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight",
                metadata={LABELS_KEY: json.dumps(axes_labels(fig))})
    pyplot().close(fig)
    fileio.write_bytes_atomic(path, buffer.getvalue())


def png_labels(path):
    """The axes labels stored by `save_figure` in the PNG at `path`; raises if it is not a valid
    PNG (the image is decoded in full)."""
    from PIL import Image
    from base import fileio
    with fileio.open_read(path) as f:
        data = f.read()
    image = Image.open(io.BytesIO(data))
    image.load()
    if image.format != "PNG" or image.width < 10 or image.height < 10:
        raise ValueError(f"{path}: not a PNG plot ({image.format}, {image.size})")
    return json.loads(image.text.get(LABELS_KEY, "[]"))
