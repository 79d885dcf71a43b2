"""The picture in docs/scheduling.md: one H200 node's MIG layout under FirstFit and LeastFragmentation.

    python bench/mig_layout.py [--out docs/images/h200-mig-layout.png]

The same jobs arrive on an idle H200 node (8 cards, dynamic MIG, ``tests/fixtures/dra/h200.py``): a
whole-GPU job, three 1g.18gb, then a 4g.71gb, a 3g.71gb and another 4g.71gb. Each is placed by the real
gang allocator under each policy (``queueing.dra.scoring.place_scored``) and kept; the picture shows
the eight memory slices of the first cards after each step (before: after the small slices; after:
once the larger profiles came). Prints where each job went.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from queueing.api.core import Node, Pod
from queueing.api.resource import DeviceClass, ResourceClaimTemplate, ResourceSlice
from queueing.dra.gang import ClusterState
from queueing.dra.scoring import POLICIES, Scorer, place_scored

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "dra"))
import h200  # noqa: E402

HW = h200.hardware()
PROFILES = {p["name"]: p for p in HW["profiles"]}
JOBS = ["gpu", "1g.18gb", "1g.18gb", "1g.18gb", "4g.71gb", "3g.71gb", "4g.71gb"]
CARDS = 4  # cards drawn


def template(name: str) -> ResourceClaimTemplate:
    if name == "gpu":
        body = {"deviceClassName": "gpu.nvidia.com", "count": 1}
    else:
        expr = f"device.attributes['gpu.nvidia.com'].profile == '{name}'"
        body = {"deviceClassName": "mig.nvidia.com", "count": 1, "selectors": [{"cel": {"expression": expr}}]}
    return ResourceClaimTemplate.model_validate(
        {
            "metadata": {"name": name.replace(".", "-"), "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [{"name": "g", "exactly": body}]}}},
        }
    )


def pod(i: int, name: str) -> Pod:
    return Pod.model_validate(
        {
            "metadata": {"name": f"job-{i}", "namespace": "default"},
            "spec": {
                "containers": [{"name": "c"}],
                "resourceClaims": [{"name": "g", "resourceClaimTemplateName": name.replace(".", "-")}],
            },
        }
    )


def layouts(policy: str) -> list[list[tuple[int, int, int, str]]]:
    """After each job: the instances placed as (card, start, size, label)."""
    node = Node.model_validate(h200.node("h200-0"))
    slices = [ResourceSlice.model_validate(s) for s in h200.node_slices("h200-0", HW)]
    classes = [DeviceClass.model_validate(c) for c in h200.CLASSES]
    st = ClusterState([node], slices, classes, templates=[template(n) for n in set(JOBS)])
    sc = Scorer(st)
    placed: list[tuple[int, int, int, str]] = []
    out = []
    for i, name in enumerate(JOBS):
        r = place_scored([pod(i, name)], st, policy, scorer=sc)  # type: ignore[arg-type]
        if r.transaction is None:
            print(f"{policy}: {name} does not fit")
            out.append(list(placed))
            continue
        (dev,) = [p.device for ca in r.placements[0].claims for p in ca.picks]
        r.transaction.commit()
        attrs = dev.attributes
        if "gpu.nvidia.com/profile" in attrs:
            card = int(attrs["gpu.nvidia.com/parentIndex"][1])
            start = int(attrs["gpu.nvidia.com/placementStart"][1])
            size = int(attrs["gpu.nvidia.com/placementSize"][1])
        else:
            card, start, size = int(attrs["gpu.nvidia.com/index"][1]), 0, h200.SLICES
        placed.append((card, start, size, name))
        print(f"{policy}: {name} -> {dev.name}")
        out.append(list(placed))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "images" / "h200-mig-layout.png")
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    steps = {"before (three 1g placed)": 4, "after (4g, 3g, 4g arrived)": len(JOBS)}
    colors = {
        "gpu": "#888888",
        "1g.18gb": "#8ecae6",
        "2g.35gb": "#219ebc",
        "3g.71gb": "#fb8500",
        "4g.71gb": "#ffb703",
    }
    fig, axes = plt.subplots(len(POLICIES), len(steps), figsize=(10, 4.2))
    for r, policy in enumerate(POLICIES):
        lay = layouts(policy)
        for c, (title, k) in enumerate(steps.items()):
            ax = axes[r][c]
            for card in range(CARDS):
                for m in range(h200.SLICES):
                    ax.add_patch(Rectangle((m, card), 1, 0.8, fill=False, edgecolor="#cccccc"))
            for card, start, size, name in lay[k - 1]:
                if card >= CARDS:
                    ax.text(h200.SLICES + 0.1, CARDS - 0.6, f"{name} on card {card}", fontsize=7)
                    continue
                ax.add_patch(Rectangle((start, card), size, 0.8, color=colors[name], ec="black"))
                label = name.split(".")[0] if size == 1 else name
                ax.text(start + size / 2, card + 0.4, label, ha="center", va="center", fontsize=7)
            ax.set_xlim(0, h200.SLICES + 3)
            ax.set_ylim(CARDS, 0)
            ax.set_yticks([i + 0.4 for i in range(CARDS)], [f"card {i}" for i in range(CARDS)])
            ax.set_xticks([i + 0.5 for i in range(h200.SLICES)], [str(i) for i in range(h200.SLICES)])
            ax.set_title(f"{policy}: {title}", fontsize=9)
            if r == len(POLICIES) - 1:
                ax.set_xlabel("memory slice (MIG placement start)")
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
