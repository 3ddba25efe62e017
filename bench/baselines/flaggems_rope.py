"""Times FlagGems' rotary embeddings on the rope cases of a `fuseops bench --json` run, with the same method
(timing.py: median per launch under CUDA-graph replay; warm = same buffers, cold = rotating buffer sets >= 4x L2),
and writes a side-by-side Markdown table.

    PYTHONPATH=.baselines/flaggems/src:.baselines/pylib python3 bench/baselines/flaggems_rope.py OURS.json OUT.md [OUT.json]

What FlagGems runs for each of our ops (the same shapes, dtypes, positions and bf16 cache as `fuseops bench`):
- apply_rotary_pos_emb (flagos set): `apply_rotary_pos_emb(q, k, cos, sin, position_ids, rotary_interleaved)`,
  out of place (FlagGems' default, as in the H200 anchors).
- rotary_embedding: what FlagGems' vLLM patch does, `apply_rotary_pos_emb(q[..., :r], k[..., :r], cos, sin,
  positions, rotary_interleaved=not is_neox, inplace=True)` on [T, H, D] views (DeepSeek: head stride 192).
- mrope(layout): FlagGems-new `mrope(query, key, cos_sin_cache, positions, s_t, s_h, s_w, head_size, rotary_dim,
  is_interleaved, is_interleaved_glm, is_neox_style, axis_map)`, in place; the GLM axis map is passed explicitly.
Backward cases are skipped (FlagGems has no rope backward op). Every buffer set has its own positions and tables, as
in `fuseops bench`; FLAGGEMS_ROPE_SHARED_TABLES=1 shares one set of them (cold, they then stay in L2).
"""
import json
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import cold_sets, warm_cold_us  # noqa: E402

SHAPE = re.compile(r"^(\d+)x(\d+)/(\d+)x(\d+)(?:r(\d+))?(j?)(?:,hs(\d+))?(?:,B(\d+))?(?:,sec(\d+)/(\d+)/(\d+))?"
                   r"(?:,theta[^,]+)?(?:,mp(\d+))?(?:,cache (\w+))?$")
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
SECTIONS = {"qwen3-vl": (24, 20, 20), "qwen2.5-vl": (16, 24, 24), "glm-4.1v": (8, 12, 12)}


def glm_axis_map(section, pairs):
    """docs/ops/rope.md: slot j % 3 is the preferred axis; a spent axis hands over to the next one with quota."""
    left, axes = list(section), []
    for j in range(pairs):
        a = j % 3
        while left[a] == 0:
            a = (a + 1) % 3
        left[a] -= 1
        axes.append(a)
    return torch.tensor(axes, dtype=torch.int32, device="cuda")


def positions_of(T, axes, max_pos=32768):
    t = torch.arange(T, device="cuda")
    if axes == 1:
        return t % max_pos
    return torch.stack((t % max_pos, (t // 16) % max_pos, (t % 16) % max_pos))


def case_fn(r, fg):
    """(make(set_index) -> args, fn(args)) for one of our rows, or None when FlagGems has no counterpart."""
    m = SHAPE.match(r["shape"])
    op = r["op"]
    if not m or "backward" in op:
        return None
    T, Hq, Hk, D = (int(m.group(i)) for i in range(1, 5))
    rd = int(m.group(5) or D)
    neox = m.group(6) != "j"
    hs = int(m.group(7) or D)
    B = int(m.group(8) or 0)
    dt = DTYPES[r["dtype"]]
    cdt = DTYPES[m.group(13)] if m.group(13) else dt
    h = rd // 2
    max_pos = int(m.group(12)) if m.group(12) else max(4096, T // max(B, 1)) if op.startswith("apply") else 32768

    def heads(H):
        return torch.randn(T, H, hs, device="cuda", dtype=dt)[..., :D]

    # Every buffer set has its own positions and tables, as in `fuseops bench` (RopeBench::allocate): cold, the
    # position -> cache row chain reads them from memory too. FLAGGEMS_ROPE_SHARED_TABLES=1: one set of tables and
    # positions for all sets (what this script did before; cold, they then stay in L2).
    shared = {}

    def once(key, make_value):
        if os.environ.get("FLAGGEMS_ROPE_SHARED_TABLES") != "1":
            return make_value()
        if key not in shared:
            shared[key] = make_value()
        return shared[key]

    def table(cols, key="table"):
        return once((key, cols), lambda: torch.randn(max_pos, cols, device="cuda").to(cdt))

    def positions(axes):
        return once(("pos", axes), lambda: positions_of(T, axes, max_pos))

    if op.startswith("apply_rotary_pos_emb"):
        seq = T // B

        def make(i):
            return (heads(Hq).view(B, seq, Hq, D), heads(Hk).view(B, seq, Hk, D), table(h, "cos"), table(h, "sin"),
                    once("ids", lambda: torch.arange(seq, device="cuda").repeat(B, 1) % max_pos))

        return make, lambda a: fg["apply"](a[0], a[1], a[2], a[3], a[4], rotary_interleaved=not neox)
    if op.startswith("rotary_embedding"):
        def make(i):
            return heads(Hq)[..., :rd], heads(Hk)[..., :rd], table(h, "cos"), table(h, "sin"), positions(1)

        return make, lambda a: fg["apply"](a[0], a[1], a[2], a[3], a[4], rotary_interleaved=not neox, inplace=True)
    if op.startswith("mrope"):
        layout = op[op.index("(") + 1:-1]
        section = tuple(int(m.group(i)) for i in (9, 10, 11)) if m.group(9) else SECTIONS.get(r["set"])
        if section is None:
            return None
        axis_map = glm_axis_map(section, h) if layout == "interleaved_glm" else None

        def make(i):
            return (torch.randn(T, Hq * D, device="cuda", dtype=dt), torch.randn(T, Hk * D, device="cuda", dtype=dt),
                    table(rd), positions(3))

        return make, lambda a: fg["mrope"](a[0], a[1], a[2], a[3], *section, D, rd,
                                           is_interleaved=layout == "interleaved",
                                           is_interleaved_glm=layout == "interleaved_glm", is_neox_style=neox,
                                           axis_map=axis_map)
    return None


def main():
    ours_path, md_path = sys.argv[1], sys.argv[2]
    json_path = sys.argv[3] if len(sys.argv) > 3 else None
    from flag_gems.fused.mrope import mrope
    from flag_gems.fused.rotary_embedding import apply_rotary_pos_emb

    fg = {"apply": apply_rotary_pos_emb, "mrope": mrope}
    ours = json.load(open(ours_path))
    rows = []
    for r in ours["results"]:
        made = case_fn(r, fg)
        if made is None:
            continue
        make, fn = made
        first = make(0)
        # q / k (twice: the outputs when out of place), positions and tables
        set_bytes = sum(t.untyped_storage().nbytes() for t in first[:2]) * 2
        if os.environ.get("FLAGGEMS_ROPE_SHARED_TABLES") != "1":
            set_bytes += sum(t.untyped_storage().nbytes() for t in first[2:])
        sets = cold_sets(set_bytes)
        args = [first] + [make(i) for i in range(1, sets)]
        try:
            fn(args[0])
        except Exception as e:  # a shape FlagGems rejects: reported, not timed
            print("flaggems %s %s fails: %s" % (r["op"], r["shape"], repr(e)[:200]), flush=True)
            continue
        warm, cold = warm_cold_us(lambda i: fn(args[i]), sets)
        del args, first
        torch.cuda.empty_cache()
        row = dict(set=r["set"], op=r["op"], shape=r["shape"], dtype=r["dtype"], bytes=r["bytes"],
                   ours_warm=r["warm_us"], ours_cold=r["cold_us"], copy_us=r["copy_rate_us"], flaggems_warm=warm,
                   flaggems_cold=cold)
        rows.append(row)
        print("%-15s %-28s %-24s ours %8.2f / %8.2f us  flaggems %8.2f / %8.2f us  speedup %5.2f / %5.2f" % (
            row["set"], row["op"], row["shape"], r["warm_us"], r["cold_us"], warm, cold, warm / r["warm_us"],
            cold / r["cold_us"]), flush=True)
    with open(md_path, "w") as f:
        f.write("Side by side in one run on %s: fuseops vs FlagGems (see bench/baselines/flaggems_rope.py for what "
                "FlagGems runs per op). Median us per launch under CUDA-graph replay; warm = same buffers, cold = "
                "rotating sets >= 4x L2. TB/s and x copy on our cold time (bytes the op must touch); copy rate %.3f "
                "TB/s; empty kernel %.2f us.\n\n" % (ours["device"], ours["copy_tbps"], ours["empty_kernel_us"]))
        f.write("| set | op | shape | dtype | ours warm | ours cold | ours TB/s cold | x copy | FlagGems warm | "
                "FlagGems cold | speedup warm | speedup cold |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write("| %s | %s | %s | %s | %.2f | %.2f | %.3f | %.2f | %.2f | %.2f | %.2f | %.2f |\n" % (
                r["set"], r["op"], r["shape"], r["dtype"], r["ours_warm"], r["ours_cold"],
                r["bytes"] / r["ours_cold"] / 1e6, r["ours_cold"] / r["copy_us"], r["flaggems_warm"],
                r["flaggems_cold"], r["flaggems_warm"] / r["ours_warm"], r["flaggems_cold"] / r["ours_cold"]))
    if json_path:
        json.dump(rows, open(json_path, "w"), indent=1)
    slower = [r for r in rows if r["flaggems_warm"] < r["ours_warm"] or r["flaggems_cold"] < r["ours_cold"]]
    print("flaggems side by side: %d cases, %d where FlagGems is faster warm or cold" % (len(rows), len(slower)))


if __name__ == "__main__":
    main()
