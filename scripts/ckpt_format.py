"""ckpt_format.py - what the Python scripts read of an hgrn checkpoint
without numpy or torch: the safetensors header and the config text in its
metadata. export_onnx.py (numpy) and pytorch/hgrn_torch.py (torch) build
their tensors on top of these, so that both read a file the same way.
Errors are ValueError with a message that names the file or the line."""
import json
import struct


def safetensors_header(data, path):
    """data (a whole safetensors file's bytes) -> (header {name: entry},
    metadata {key: value}, the offset where tensor data begins)."""
    if len(data) < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError(f"{path}: not a safetensors file (its header length {n} runs past the end of the file)")
    try:
        header = json.loads(data[8:8 + n])
    except ValueError:
        raise ValueError(f"{path}: not a safetensors file (the header is not JSON)") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: not a safetensors file (the header is not a JSON object)")
    meta = header.pop("__metadata__", None) or {}
    return header, meta, 8 + n


class ConfigLineError(ValueError):
    """A config line that is not 'key = value' under a [section]: line is
    its number (from 1), raw its text."""

    def __init__(self, line, raw):
        super().__init__(f"config line {line}: expected 'key = value' under a [section]")
        self.line, self.raw = line, raw


def parse_config(text):
    """hgrn config text -> {section: {key: value text}}, as the C reader
    takes it: comments dropped, quotes removed, and the legacy key
    model.arch = hgrn1|hgrn2 read as model.mixer = hgru1|hgru2."""
    out, section = {}, None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line[1:line.index("]")].strip() if "]" in line else None
            out.setdefault(section, {})
            continue
        if "=" not in line or section is None:
            raise ConfigLineError(n, raw)
        key, value = (s.strip() for s in line.split("=", 1))
        if value.startswith('"'):
            end = value.find('"', 1)
            value = value[1:end if end > 0 else len(value)]
        else:
            for i, ch in enumerate(value):
                if ch in "#;" and (i == 0 or value[i - 1] in " \t"):
                    value = value[:i].strip()
                    break
        if section == "model" and key == "arch":
            key, value = "mixer", {"hgrn1": "hgru1", "hgrn2": "hgru2"}.get(value, value)
        out[section][key] = value
    return out
