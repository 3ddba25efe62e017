"""Side-by-side table of `fuseops bench --md` results of several binaries (an A/B of kernel variants in one lease).

    python3 bench/ab.py OUT.md LABEL=FILE.md [LABEL=FILE.md ...]

Each FILE.md is a `fuseops bench --md` table; a LABEL may be given several times (repeated runs of one binary): its
time per case is the median of its runs. The first label is the reference: the table lists warm and cold us per label
and each label's cold time relative to the reference (< 1: faster). Cases missing from a file are left blank.
"""
import statistics
import sys


def read_table(path):
    """{(set, op, shape, dtype): (warm_us, cold_us)} of one `fuseops bench --md` file."""
    rows = {}
    header = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("|"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
                continue
            if set(cells[0]) <= set("-: "):
                continue
            row = dict(zip(header, cells))
            try:
                key = (row["set"], row["op"], row["shape"], row["dtype"])
                rows[key] = (float(row["warm us"]), float(row["cold us"]))
            except (KeyError, ValueError):
                continue
    return rows


def main(argv):
    if len(argv) < 3 or any("=" not in a for a in argv[2:]):
        sys.exit(__doc__)
    out = argv[1]
    runs = {}  # label -> list of tables, in order of first appearance
    for arg in argv[2:]:
        label, path = arg.split("=", 1)
        runs.setdefault(label, []).append(read_table(path))
    labels = list(runs)
    keys = []
    for tables in runs.values():
        for table in tables:
            keys += [k for k in table if k not in keys]

    def median(label, key, col):
        values = [t[key][col] for t in runs[label] if key in t]
        return statistics.median(values) if values else None

    head = ["set", "op", "shape", "dtype"]
    for label in labels:
        head += [f"{label} warm us", f"{label} cold us"] + ([] if label == labels[0] else [f"{label} / {labels[0]}"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in keys:
        cells = list(key)
        ref = median(labels[0], key, 1)
        for label in labels:
            warm, cold = median(label, key, 0), median(label, key, 1)
            cells += [f"{warm:.2f}" if warm is not None else "", f"{cold:.2f}" if cold is not None else ""]
            if label != labels[0]:
                cells.append(f"{cold / ref:.3f}" if cold is not None and ref else "")
        lines.append("| " + " | ".join(cells) + " |")
    runs_line = ", ".join(f"{label}: {len(runs[label])} run(s)" for label in labels)
    text = f"A/B of `fuseops bench` tables ({runs_line}; median per label; ratio on cold times)\n\n" + "\n".join(lines)
    with open(out, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main(sys.argv)
