"""``convert slm``'s gates on this host and on an AVX2-only x86: does a SmolLM2 verdict depend on the build host?

SmolLM2's gate (teacher-forced KL divergence, same top-1 and perplexity ratio against fp32 on the held-out text,
``converters/slm/build.py``) and the greedy prompts run a copy of the model with every MatMulNBits at accuracy
level 0, so that what they measure is the shipped weights and not the build machine's int8 kernels (docs/slm.md,
"What the gates measure"). This script runs the whole conversion a user runs with ``edge-deploy convert slm
--target T`` (the INT4 build, the gate, the greedy prompts and their smoke check, the report) once natively and
once as
``qemu-x86_64 -cpu Haswell`` (AVX2 and FMA, no AVX-512, no VNNI: the CPU on which the first release's
rpi4 INT4 build changed its greedy answers), for each target, and prints both hosts' figures side by side.

    .venv/bin/python -m benchmarks run slm_gates_hosts [--targets rpi4,rpi5] [--hosts native,haswell] [--quick]

One step is shared and run natively: the fp32 torch export (``SlmOptions.work_dir``, reused exactly as a kept
export is; the export is float tracing, with no int8 kernel, and ~50 minutes under TCG). Everything the gates
decide runs on the emulated CPU: the GGUF read, the INT4 repack, the fp32 reference and the candidate through
onnxruntime, both gates. A conversion that fails its gate is reported, not raised. Without ``--quick`` each
target's table is written to its own section of docs/benchmarks.md, ``slm-gates-hosts-<target>`` (a target's
hosts are compared within one run; an emulated run takes ~1.5 h, so targets are often run apart).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness.report import REPO, machine_line, write_section

NAME = "slm_gates_hosts"
SUMMARY = "convert slm's gates on this host and on an AVX2-only x86"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("slm-gates-hosts-rpi4", "slm-gates-hosts-rpi5")

CACHE = REPO / ".cache" / "bench" / "slm-gates"
HOSTS = {"native": (), "haswell": ("qemu-x86_64", "-cpu", "Haswell")}
#: An emulated conversion takes tens of minutes (TCG is ~20x slower than the host).
CHILD_TIMEOUT_S = 4 * 3600

_CHILD = """
import json, sys
from pathlib import Path
from converters.slm.build import SlmOptions, convert_slm
from edge.cpu import int8_kernels
from edge.errors import ValidationError
from edge.profiles import Precision, load_profile
target, out, work = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
say = lambda line: print(f"[{target}] {line}", file=sys.stderr, flush=True)
try:
    convert_slm(load_profile(target), Precision.INT4, out, progress=say, options=SlmOptions(work_dir=work))
    verdict = "passed"
except ValidationError as exc:  # the report is written before the gate raises
    verdict = str(exc)
print(json.dumps({"kernels": int8_kernels().describe(), "verdict": verdict}))
"""


def _convert(host: str, target: str, cache: Path, fresh: bool) -> dict:
    """One ``convert slm`` of ``target`` at INT4 on ``host``; its verdict, CPU kind and report. A finished run
    is kept in ``run.json`` beside its build and reused unless ``fresh`` (an emulated one takes tens of minutes)."""
    out, work = cache / f"{target}-{host}", cache / "work"  # work: the shared fp32 export (made by the first run)
    kept = out / "run.json"
    if kept.is_file() and not fresh:
        run = json.loads(kept.read_text(encoding="utf-8"))
        if "gate" in run["report"]:  # a run from before the teacher-forced gate is made again
            print(f"reusing {kept} (--fresh to run it again)", file=sys.stderr)
            return run
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": "0"}
    cmd = [*HOSTS[host], sys.executable, "-c", _CHILD, target, str(out), str(work)]
    start, commit = time.monotonic(), _commit()  # the code the run starts with (a run takes tens of minutes)
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, timeout=CHILD_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{host} {target}: convert slm exited {done.returncode} (its log is above)")
    child = json.loads(done.stdout.strip().splitlines()[-1])
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    run = {**child, "report": report, "wall_s": round(time.monotonic() - start, 1), "commit": commit}
    kept.write_text(json.dumps(run, indent=2), encoding="utf-8")
    return run


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "?"


def _table(runs: dict[tuple[str, str], dict]) -> str:
    heads = ["target", "host (CPU features)", "mean / p99 KLD", "same top-1", "perplexity ratio",
             "greedy: leading tokens equal fp32", "gate"]  # fmt: skip
    lines = ["| " + " | ".join(heads) + " |", "|---|---|---:|---:|---:|---|---|"]
    for (target, host), run in runs.items():
        gate, greedy = run["report"]["gate"], run["report"]["greedy_agreement"]
        tokens = ", ".join(str(p["leading_equal"]) for p in greedy["prompts"])
        verdict = "passed" if run["verdict"] == "passed" else "**failed**"
        cells = [
            target,
            f"{host}, {run['kernels']}",
            f"{gate['mean_kld']:.2g} / {gate['p99_kld']:.2g}",
            f"{gate['same_top1_percent']:.2f} %",
            f"{gate['perplexity_ratio']:.6f}",
        ]
        lines.append("| " + " | ".join([*cells, tokens, verdict]) + " |")
    return "\n".join(lines)


def _same_verdicts(runs: dict[tuple[str, str], dict]) -> list[str]:
    lines = []
    for target in sorted({t for t, _ in runs}):
        mine = {h: r for (t, h), r in runs.items() if t == target}
        verdicts = {h: r["verdict"] == "passed" for h, r in mine.items()}
        klds = {h: r["report"]["gate"]["mean_kld"] for h, r in mine.items()}
        equal = [[p["leading_equal"] for p in r["report"]["greedy_agreement"]["prompts"]] for r in mine.values()]
        same = len(set(verdicts.values())) == 1 and all(e == equal[0] for e in equal)
        spread = max(klds.values()) - min(klds.values())
        lines.append(
            f"- {target}: verdicts {'the same' if same else '**differ**'} on {', '.join(mine)}; "
            f"mean KLDs differ by {spread:.2e}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="rpi4,rpi5", help="profiles to convert for, comma-separated")
    parser.add_argument("--hosts", default="native,haswell", help=f"of {', '.join(HOSTS)}, comma-separated")
    parser.add_argument("--quick", action="store_true", help="print only; do not write docs/benchmarks.md")
    parser.add_argument("--fresh", action="store_true", help="convert again even where a finished run is kept")
    parser.add_argument("--cache", type=Path, default=CACHE, help=f"where builds and finished runs are kept ({CACHE})")
    args = parser.parse_args(argv)
    targets, hosts = args.targets.split(","), args.hosts.split(",")
    if unknown := [h for h in hosts if h not in HOSTS]:
        parser.error(f"--hosts: unknown {', '.join(unknown)}; expected of {', '.join(HOSTS)}")
    args.cache.mkdir(parents=True, exist_ok=True)
    machine = machine_line()
    order = sorted(((t, h) for t in targets for h in hosts), key=lambda th: (th[1] != "native", th))
    runs = {}
    for target, host in order:
        print(f"convert slm --target {target} on {host}", file=sys.stderr)
        runs[(target, host)] = _convert(host, target, args.cache, args.fresh)
        print(json.dumps({k: v for k, v in runs[(target, host)].items() if k != "report"}), file=sys.stderr)
    runs = {k: runs[k] for k in sorted(runs)}
    (args.cache / "result.json").write_text(json.dumps({f"{t} {h}": r for (t, h), r in runs.items()}, indent=2))
    for target in targets:  # a section per target: each table is one run's side-by-side comparison
        mine = {(t, h): r for (t, h), r in runs.items() if t == target}
        markdown = _markdown(target, args.hosts, machine, mine)
        print(markdown)
        if not args.quick:
            print(f"wrote {write_section(f'slm-gates-hosts-{target}', markdown)}", file=sys.stderr)
    return 0


def _markdown(target: str, hosts: str, machine: str, runs: dict[tuple[str, str], dict]) -> str:
    walls = ", ".join(f"{t} {h} {r['wall_s'] / 60:.0f} min" for (t, h), r in runs.items())
    return "\n".join([
        f"## SmolLM2's gate on a VNNI host and on an AVX2-only x86 (`convert slm --target {target}`, INT4)",
        "",
        f"`.venv/bin/python -m benchmarks run slm_gates_hosts --targets {target} --hosts {hosts}` — {machine}",
        "",
        "The whole INT4 conversion (GGUF read, repack, the gate, report) run natively and as "
        "`qemu-x86_64 -cpu Haswell` (AVX2 and FMA, no AVX-512, no VNNI); only the fp32 torch export is made "
        "once, natively, and shared. The gate: teacher-forced against fp32 over 8,192 held-out tokens (windows "
        "of 512); greedy (a report and the Paris smoke check): leading tokens of each of the five fixed prompts "
        "equal to fp32's, of the profile's `slm_greedy_tokens`; fp32 and the gate copy both computed on that "
        "host. Wall time per conversion (TCG is slow; times mean nothing else): "
        + walls + ".",
        "",
        _table(runs),
        "",
        *_same_verdicts(runs),
    ])  # fmt: skip
