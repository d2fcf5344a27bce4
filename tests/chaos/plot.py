"""Plots the chaos suite's samples: one panel per fault, each request's latency against the
time it was sent, the fault's span shaded, client-visible errors marked.

Usage: plot.py SAMPLES_DIR OUT.png (the directory HF_CHAOS_OUT named)."""

import csv
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def summary(path):
    fields = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition("\t")
        fields[key] = value
    return fields


def main(samples_dir, out):
    runs = sorted(Path(samples_dir).glob("*.tsv"))
    if not runs:
        sys.exit(f"no samples in {samples_dir}")
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 2.6 * len(runs)), squeeze=False)
    for ax, tsv in zip(axes[:, 0], runs):
        info = summary(tsv)
        ok_t, ok_ms, err_t, err_ms = [], [], [], []
        with open(tsv.with_suffix(".csv")) as f:
            for row in csv.DictReader(f):
                t, ms = float(row["at_s"]), max(float(row["latency_ms"]), 0.01)
                if row["ok"] == "true":
                    ok_t.append(t)
                    ok_ms.append(ms)
                else:
                    err_t.append(t)
                    err_ms.append(ms)
        began, healed = float(info["began_s"]), float(info["healed_s"])
        ax.axvspan(began, healed, color="orange", alpha=0.25, label="fault")
        ax.scatter(ok_t, ok_ms, s=2, color="tab:blue", label="answered")
        if err_t:
            ax.scatter(err_t, err_ms, s=18, marker="x", color="red", label="error reply")
        ax.set_yscale("log")
        ax.set_ylabel("latency (ms)")
        ax.set_title(
            f"{info['fault']}: fault {healed - began:.1f} s, longest hold "
            f"{float(info['longest_hold_s']):.1f} s, {info['requests']} requests, "
            f"{info['errors']} errors, {info['lost']} lost, {info['doubled']} applied twice",
            fontsize=9,
        )
        ax.legend(loc="upper right", fontsize=7)
    axes[-1, 0].set_xlabel("time since the load started (s)")
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
