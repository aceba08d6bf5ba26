"""What a worker does with one cell: call the library entry point of its kind in-process and return a record.

Each kind's code lives in mschecker.campaign.kinds (check.py, sd.py, kernels.py); run_cell dispatches through
its KINDS table. This docstring keeps the record's shape and the fingerprint choices of every kind in one place.

Why in-process and not `mschecker ...` per cell: a subprocess per cell pays the interpreter, numpy, onnx and
onnxruntime imports (~3 s here) again for every cell, and its result would have to be parsed back from text.
The worker imports once and calls the same functions the commands call:
- check:   mschecker.modelcheck.check.check_model (the check command's library entry point) on model + inputs +
           goldens; golden directories are verified on load (mschecker.tensors.golden_store.load). With a ``referee``
           (mschecker.modelcheck.referee) the cell also records ``<output>.referee_ratio`` (err run / err referee against
           float64) and ``referee_pass`` (1 or 0), and its status follows ``judge`` (default both).
- sd:      mschecker.sd.check.run_check (the `mschecker sd` check: float64 reference vs emulated NPU); with a
           ``referee``, ``<stage output>.referee_ratio`` and ``referee_pass`` as for check cells.
- kernels: mschecker.kernels.suite.run_suite for one kernel (every variant, every planted bug).

Isolation comes from the engine instead: a cell that raises becomes a `crashed` record here (the campaign goes
on), a cell that runs past its timeout has its worker restarted by the engine, a worker that dies is recorded
by the engine as `killed`.

A record is plain data: status (pass | fail | crashed), one-line reason, metrics {name: float} (NaN allowed:
the store keeps it), detail (JSON-ready), versions, profile_hash, model_sha256, timings and the worker's peak
RSS so far; and, for a check cell that runs the graph executor (device "reference" or "npu"), fingerprints:
{"names": [node keys], "data": bytes} (mschecker.campaign.fingerprints.Recorder.record(); the store's
record_cell writes them), one fingerprint per float output of every device op, recorded for the first repeat
only (repeat 0: on those bit-exact devices every repeat computes the same bits, and repeats > 0 exist only on
devices that are not) and for the cell's one input set (a check cell has one). An "ort" (onnxruntime) cell has
none: onnxruntime runs the graph as one call and exposes no per-node values.

An sd cell records the judged run's fingerprints (the emulated NPU: bit-exact), through run_check's on_tensor
hook (kinds.sd.SDFingerprints; not the float64 baseline, not the localization's nor the fix search's reruns):
every float output of every device op of every stage, in run order, keyed "<stage>[@<step>][#<run>]/<device op>:<output>"
-- text_encoder/ (text_encoder_2/ for SDXL), unet@1/ and unet@<last>/, vae_decoder/ (then vae_decoder#2/, ...
for the second and later images, decoded one at a time; "#k" also marks the k-th run of a static-batch-1 export
within one call). The UNet at its first and last step only: a row per node per step would multiply the rows by
the step count (x10 at the default), while the first step is where a change of the text encoders (or of the
UNet itself) shows first, and the last carries the drift accumulated over every step into the VAE; a change
that starts in a middle step shows at the last one, which is named instead (the first moved node is still in the
UNet). Every image is decoded and recorded: a change that depends on the values (an overflow in one image only)
must still have a first moved node, and a cell with one image, the usual, pays nothing for it. Rows per cell:
tiny preset 808 (56 + 2 x 333 + 86; 16 KB packed), small 1,739 (108 + 2 x 749 + 133; 35 KB), at any step count.
The fingerprints cost ~15% of the NPU run's time (small preset, 10 steps: 0.9 s of ~5 s).

A kernels cell records, through run_suite's on_outputs hook (kinds.kernels.KernelFingerprints), one fingerprint
per (variant, case group, output) in the suite's order, keyed "<kernel>/<variant>/<group>:<output>", the group being the
cases' strategy, "golden", or "search" (a planted bug's found case): the outputs of all of a group's cases as
one (fingerprints.FingerprintSum). A variant that changed names itself and the kind of input that shows it, in
~variants x (strategies + 1) rows (10 to 80 a kernel), where one row per case would be 20x that.
"""
from __future__ import annotations

import functools
import hashlib
import os
import platform
import resource
import time
import traceback
from pathlib import Path

from mschecker.campaign.kinds import KINDS
from mschecker.campaign.kinds.base import STATUS_CRASHED, Cell
from mschecker.errors import InputError
from mschecker.machine import MACHINE_FACTS, cpu_model, machine_facts  # noqa: F401  (MACHINE_FACTS: the store's columns)
from mschecker import __version__


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message`, at most 300 characters (what the store and the table show)."""
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text[:300]


def run_cell(cell: Cell, local_paths: dict[str, str] | None = None) -> dict:
    """Run one cell; never raises an Exception (a failure inside the cell is a `crashed` record).

    local_paths: {declared path: path on this worker} for cells whose files were shipped (see engine)."""
    started = time.time()
    t0 = time.perf_counter()
    record = {"status": STATUS_CRASHED, "reason": "", "metrics": {}, "detail": {}, "profile_hash": None,
              "model_sha256": None}
    try:
        kind = KINDS[cell.kind]
        record.update(kind.run(cell, kind.localize(cell.params, local_paths or {})))
    except Exception as exc:  # noqa: BLE001 - a crashing cell is recorded, the campaign goes on
        record.update(status=STATUS_CRASHED, reason=one_line(exc),
                      detail={"where": _where(exc), "input_error": isinstance(exc, InputError)})
    record.update(started_at=started, wall_s=time.perf_counter() - t0, versions=versions(),
                  machine=machine_facts(), peak_rss_bytes=peak_rss_bytes())
    return record


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""


@functools.lru_cache(maxsize=1)
def versions() -> dict:
    """What produced a result (recorded per cell: a cluster may mix machines)."""
    import numpy
    import onnxruntime  # here, not at the top: the driver's validation does not need onnxruntime


    return {"mschecker": __version__, "onnxruntime": onnxruntime.__version__, "numpy": numpy.__version__,
            "python": platform.python_version(), "cpu": cpu_model(), "host": platform.node()}


def peak_rss_bytes() -> int:
    """This process's peak resident set so far (Linux reports ru_maxrss in KiB, macOS in bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if platform.system() == "Darwin" else peak * 1024)


def worker_files_root(run_id: str) -> Path:
    """Where a worker materializes shipped files for a run (removed by the engine at the end of the run)."""
    import tempfile

    safe = hashlib.sha256(run_id.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"mschecker-campaign-{os.getuid() if hasattr(os, 'getuid') else 0}-{safe}"
