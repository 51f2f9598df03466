"""out_path.py - the check the scripts that write one output file
(export_onnx.py, plot_metrics.py) make before any work, so that a path that
cannot be written is refused (exit 2) instead of failing after the work."""
import os


def check_output(out, what):
    """None when out can be written (a file is created and removed there),
    else the reason; what names the file to give when out is a directory
    ("the PNG file")."""
    if os.path.isdir(out):
        return f"{out}: is a directory (give {what} to write)"
    d = os.path.dirname(out) or "."
    if not os.path.isdir(d):
        return f"{out}: {d} is not a directory" if os.path.exists(d) else f"{out}: directory {d} does not exist"
    probe = os.path.join(d, f".{os.path.basename(out)}.probe.{os.getpid()}")
    try:
        with open(probe, "wb"):
            pass
        os.remove(probe)
    except OSError as e:
        return f"{out}: cannot write in {d} ({e.strerror})"
    return None
