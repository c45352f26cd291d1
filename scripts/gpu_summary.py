"""Print one JSON summary of a scripts/gpu_run.sh output folder: the device, each step's exit code and
seconds, and the headline figures of every recorded file (measured, and computed where marked).

    python scripts/gpu_summary.py gpu-out > gpu-out/summary.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def throughput(r: dict) -> dict:
    systems = r["systems"]
    return {"tok_s": {k: v.get("output_tokens_per_s", v.get("error")) for k, v in systems.items()},
            "like_for_like": r.get("like_for_like"), "ratios": r.get("ratios"),
            "roofline_tok_s_computed": r["roofline"].get("output_tokens_per_s"),
            "decode_step_ms": {k: (systems["ours"].get("mean_decode_step_ms") or {}).get(k)
                               for k in ("wall", "gpu_forward")}}


def latency(r: dict) -> dict:
    rows = []
    for row in r["rows"]:
        short = {k: row[k] for k in ("batch", "prompt_tokens", "itl_ms", "ttft_ms")}
        short["floor_ms_computed"] = row.get("computed", {}).get("step_floor_ms")
        for peer in ("hf_eager", "hf_static_compile"):
            if peer in row:
                short[peer] = {k: row[peer][k] for k in ("itl_ms", "ttft_ms", "error", "skipped") if k in row[peer]}
        rows.append(short)
    return {"rows": rows, "kv_cache_speedup_computed": (r.get("kv_cache_speedup") or {}).get("speedup"),
            "goals": r.get("goals")}


def prefill(r: dict) -> dict:
    return {"ceilings": r.get("ceilings"), "goals": r.get("goals"),
            "rows": [{"prompt_tokens": x["prompt_tokens"], "ttft_ms": x["ttft_ms"], "gpu_forward_ms": x["gpu_forward_ms"],
                      "compute_floor_ms_computed": x["computed"]["compute_floor_ms"],
                      "ttft_over_compute_floor": x["computed"]["ttft_over_compute_floor"]} for x in r["rows"]]}


def main(folder: str) -> int:
    out = Path(folder)
    summary = {"gpu": (out / "gpu.txt").read_text().strip() if (out / "gpu.txt").exists() else None,
               "steps": [line for line in (out / "steps.txt").read_text().splitlines()
                         if " rc=" in line or line.endswith("skipped")] if (out / "steps.txt").exists() else []}
    for path in sorted((out / "data").glob("*.json")):
        rec = json.loads(path.read_text())
        kind = rec["name"].split("-")[0]
        try:
            figures = {"throughput": throughput, "latency": latency, "prefill": prefill}[kind](rec["results"])
        except (KeyError, TypeError, ZeroDivisionError) as e:
            figures = {"unreadable": f"{type(e).__name__}: {e}"}
        summary[rec["name"]] = {"device": rec["device"], "model": (rec.get("model") or {}).get("name"), **figures}
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "gpu-out"))
