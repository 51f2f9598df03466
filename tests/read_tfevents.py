#!/usr/bin/env python3
"""read_tfevents.py RUN_DIR [--reader auto|own] - reads a run's TensorBoard
event files (train.tensorboard = 1) and checks that their scalars are
metrics.jsonl's: every number of every record but "step", as train/KEY (or
eval/KEY for records with val_top1), at the record's step, equal as float32,
and nothing else.

Reader: tensorboard's own accumulators (EventAccumulator, and
plugin_event_accumulator's, which the TensorBoard UI uses) where `import
tensorboard` works (--reader auto), else (or with --reader own) the one
here: the TFRecord framing with both masked CRC-32Cs of every record
checked, the Event protobuf (wall_time 1, step 2, file_version 3, summary 5
{value 1 {tag 1, simple_value 2}}, session_log 7 {status 1}) decoded field
by field, each file starting with file_version "brain.Event:2", and
TensorBoard's rules for which files it reads, in which order, and what a
SessionLog START purges (read_own says where each comes from). A tag with
two values at one step is an error.

Prints a summary line (files, events, scalars, purged); exit 0 when the
scalars equal metrics.jsonl's, 1 otherwise (the first difference said)."""
import json
import os
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    """the data of each TFRecord, both CRCs checked"""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        if len(data) - pos < 12:
            raise ValueError(f"{path}: a record header cut off at byte {pos}")
        head = data[pos:pos + 8]
        (n,) = struct.unpack("<Q", head)
        (lcrc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if lcrc != masked(crc32c(head)):
            raise ValueError(f"{path}: the length CRC of the record at byte {pos} is wrong")
        if len(data) - pos - 16 < n:
            raise ValueError(f"{path}: the record at byte {pos} runs past the end")
        body = data[pos + 12:pos + 12 + n]
        (dcrc,) = struct.unpack("<I", data[pos + 12 + n:pos + 16 + n])
        if dcrc != masked(crc32c(body)):
            raise ValueError(f"{path}: the data CRC of the record at byte {pos} is wrong")
        yield body
        pos += 16 + n


def fields(buf):
    """(field number, wire type, value) of a protobuf message"""
    pos = 0

    def varint():
        nonlocal pos
        v, shift = 0, 0
        while True:
            b = buf[pos]
            pos += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v
    while pos < len(buf):
        key = varint()
        num, wire = key >> 3, key & 7
        if wire == 0:
            yield num, wire, varint()
        elif wire == 1:
            yield num, wire, buf[pos:pos + 8]
            pos += 8
        elif wire == 2:
            n = varint()
            yield num, wire, buf[pos:pos + n]
            pos += n
        elif wire == 5:
            yield num, wire, buf[pos:pos + 4]
            pos += 4
        else:
            raise ValueError(f"wire type {wire} of field {num} is not one an Event uses")
    if pos != len(buf):
        raise ValueError("a protobuf field runs past its message")


def decode_event(body):
    ev = {"step": 0, "values": []}
    for num, wire, v in fields(body):
        if num == 1 and wire == 1:
            ev["wall_time"] = struct.unpack("<d", v)[0]
        elif num == 2 and wire == 0:
            ev["step"] = v
        elif num == 3 and wire == 2:
            ev["file_version"] = v.decode()
        elif num == 5 and wire == 2:
            ev["summary"] = True
            for vn, vw, value in fields(v):
                if vn != 1 or vw != 2:
                    continue
                tag, simple = None, None
                for fn, fw, fv in fields(value):
                    if fn == 1 and fw == 2:
                        tag = fv.decode()
                    elif fn == 2 and fw == 5:
                        simple = struct.unpack("<f", fv)[0]
                if tag is None or simple is None:
                    raise ValueError("a Summary.Value without tag or simple_value")
                ev["values"].append((tag, simple))
        elif num == 6 and wire == 2:
            pass   # log_message (deprecated): TensorBoard reads it and does nothing with it
        elif num == 7 and wire == 2:
            ev["session_log"] = dict((fn, fv) for fn, fw, fv in fields(v)).get(1, 0)
        else:
            raise ValueError(f"Event field {num} (wire {wire}) is not one hgrn writes")
    if "wall_time" not in ev:
        raise ValueError("an Event without wall_time")
    return ev


def is_summary_events_file(name):
    """tensorboard/backend/event_processing/io_wrapper.py IsSummaryEventsFile"""
    return "tfevents" in name and not name.endswith(".profile-empty")


def parse_file_version(text):
    """event_util.ParseFileVersion: the number after "brain.Event:", -1 when none"""
    try:
        return float(text.split("brain.Event:")[-1])
    except ValueError:
        return -1.0


def read_own(run_dir):
    """TensorBoard's rules, from tensorboard/backend/event_processing/:
    directory_watcher.DirectoryWatcher._GetNextPath reads the files one after
    another in sorted path order; plugin_event_accumulator.
    EventAccumulator._MaybePurgeOrphanedData, with the accumulator's
    file_version (any event's, kept across files) >= 2, purges on a
    SessionLog START (_CheckForRestartAndMaybePurge) but for the first START
    it sees, keeping x.step < START's step of every tag (_Purge, by_tags
    False); below version 2 it purges instead the tags of a summary whose
    step is below the last summary's, keeping x.step < its step
    (_CheckForOutOfOrderStepAndMaybePurge). Values are appended as read
    (reservoir.Reservoir, size 0 keeps all), so a tag written twice at one
    step shows twice."""
    names = sorted(n for n in os.listdir(run_dir) if is_summary_events_file(n))
    if not names:
        raise ValueError(f"{run_dir}: no events.out.tfevents.* file")
    scalars, events, purged = {}, 0, 0
    file_version, seen_start, most_recent_step = None, False, -1

    def purge(step, tags):
        nonlocal purged
        for tag in tags:
            kept = [(s, v) for s, v in scalars.get(tag, []) if s < step]
            purged += len(scalars.get(tag, [])) - len(kept)
            scalars[tag] = kept

    for name in names:
        path = os.path.join(run_dir, name)
        for i, body in enumerate(records(path)):
            ev = decode_event(body)
            events += 1
            if i == 0 and ev.get("file_version") != "brain.Event:2":
                raise ValueError(f"{path}: the first record is not file_version brain.Event:2")
            if "file_version" in ev:
                file_version = parse_file_version(ev["file_version"])
            has_summary = "summary" in ev
            if file_version and file_version >= 2:
                if ev.get("session_log") == 1:
                    if seen_start:
                        purge(ev["step"], list(scalars))
                    seen_start = True
            elif has_summary and ev["step"] < most_recent_step:
                purge(ev["step"], [tag for tag, _ in ev["values"]])
            if has_summary:
                most_recent_step = ev["step"]
            for tag, value in ev["values"]:
                scalars.setdefault(tag, []).append((ev["step"], value))
    return as_steps(scalars), f"{len(names)} file(s), {events} events, {purged} purged (own reader)"


def as_steps(scalars):
    """{tag: [(step, value)]} as {tag: {step: value}}; a tag twice at one step is an error"""
    out = {}
    for tag, values in scalars.items():
        steps = out.setdefault(tag, {})
        for step, value in values:
            if step in steps:
                raise ValueError(f"{tag} twice at step {step}")
            steps[step] = value
    return out


def read_tensorboard(run_dir):
    """both of tensorboard's accumulators must show the same scalars"""
    from tensorboard.backend.event_processing import event_accumulator, plugin_event_accumulator
    from tensorboard.util import tensor_util
    acc = event_accumulator.EventAccumulator(run_dir, size_guidance={"scalars": 0})
    acc.Reload()
    legacy = as_steps({tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]})
    pacc = plugin_event_accumulator.EventAccumulator(run_dir, size_guidance={"tensors": 0})
    pacc.Reload()
    plugin = as_steps({tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in pacc.Tensors(tag)]
                       for tag in pacc.Tags()["tensors"]})
    if plugin != legacy:
        raise ValueError("tensorboard's EventAccumulator and plugin_event_accumulator differ")
    files = len([n for n in os.listdir(run_dir) if is_summary_events_file(n)])
    return legacy, f"{files} file(s) (tensorboard's EventAccumulator and plugin_event_accumulator)"


def expected(run_dir):
    want = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if "event" in rec:
                continue
            prefix = "eval" if "val_top1" in rec else "train"
            for k, v in rec.items():
                if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                    want.setdefault(f"{prefix}/{k}", {})[rec["step"]] = struct.unpack("<f", struct.pack("<f", v))[0]
    return want


def main(argv):
    run_dir = argv[0]
    reader = argv[argv.index("--reader") + 1] if "--reader" in argv else "auto"
    try:
        if reader == "auto":
            try:
                import tensorboard  # noqa: F401
                got, how = read_tensorboard(run_dir)
            except ImportError:
                got, how = read_own(run_dir)
        else:
            got, how = read_own(run_dir)
        want = expected(run_dir)
    except (ValueError, OSError) as e:
        print(f"read_tfevents.py: {e}")
        return 1
    n = sum(len(s) for s in want.values())
    for tag in sorted(set(want) | set(got)):
        w, g = want.get(tag, {}), got.get(tag, {})
        for step in sorted(set(w) | set(g)):
            if step not in g:
                print(f"read_tfevents.py: {tag} at step {step}: in metrics.jsonl ({w[step]}), not in the event files")
                return 1
            if step not in w:
                print(f"read_tfevents.py: {tag} at step {step}: in the event files ({g[step]}), not in metrics.jsonl")
                return 1
            if g[step] != w[step]:
                print(f"read_tfevents.py: {tag} at step {step}: {g[step]} in the event files, {w[step]} in metrics.jsonl")
                return 1
    print(f"{how}: {n} scalars in {len(want)} tags, equal to metrics.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
