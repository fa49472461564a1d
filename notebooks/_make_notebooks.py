"""Write the notebooks NN_*.ipynb (without outputs) from the cell texts below.

    .venv/bin/python notebooks/_make_notebooks.py

The .ipynb files are the product and are committed; this script is how they
are kept consistent (same parameters cell, same setup, same closing). Edit
here, regenerate, commit both.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent


def md(text: str):
    return new_markdown_cell(textwrap.dedent(text).strip("\n"))


def code(text: str, tags: list[str] | None = None):
    cell = new_code_cell(textwrap.dedent(text).strip("\n"))
    if tags:
        cell.metadata["tags"] = tags
    return cell


def params(extra: str = ""):
    """The papermill `parameters` cell: scale, RUN, output roots, then the notebook's own knobs."""
    body = '''
    # Parameters (papermill overrides these; see lmdbio/notebook_runner.py)
    scale = "default"   # "tiny" (tests, seconds), "default" (this 2-core machine), "large" (a cluster)
    RUN = True          # False: do not measure, only replot from the committed results files
    results_root = "../data/results"
    figures_root = "../figures"
    datasets_root = "../data/datasets"
    '''
    return code(textwrap.dedent(body).strip("\n") + ("\n" + textwrap.dedent(extra).strip("\n") if extra else ""),
                tags=["parameters"])


SETUP = '''
from pathlib import Path

import pandas as pd
from IPython.display import display

from lmdbio import plots
from lmdbio.cluster import MPICluster, ensure_datasets
from lmdbio.notebook_runner import save_results

plots.setup()
'''


def resolve(scales: str, name: str, keys: str, prelude: str = ""):
    """The cell that picks the scale's settings, lets explicit parameters win, and names the outputs."""
    body = (prelude + "\n" if prelude else "") + "SCALES = " + textwrap.dedent(scales).strip() + "\n" + textwrap.dedent(f'''
    cfg = {{**SCALES[scale], **{{k: v for k, v in dict({keys}).items() if v is not None}}, "scale": scale}}
    RESULTS = Path(results_root) / "{name}"
    FIGURES = Path(figures_root)
    DATASETS = Path(datasets_root)
    cfg''').strip("\n")
    return code(body)


def datasets_cell(names: str = "cfg['datasets']"):
    return code(f'''
    # Datasets are made (once) on an engine: LMDB is never opened in this client.
    specs = [dict(path=str(DATASETS / name), preset=preset, records=n)
             for name, (preset, n) in {names}.items()]
    ''')


def write(name: str, cells: list) -> Path:
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (lmdbio venv)",
                                 "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    path = HERE / f"{name}.ipynb"
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return path


# Dataset sizes per scale. The default ones are those of `make datasets`.
DATASETS = '''{
    "tiny": {"cifar10": ("cifar10", 512), "imagenet": ("imagenet", 48)},
    "default": {"cifar10": ("cifar10", 60000), "imagenet": ("imagenet", 2000)},
    "large": {"cifar10": ("cifar10", 1_000_000), "imagenet": ("imagenet", 100_000)},
}'''

NOTEBOOKS: dict[str, list] = {}

# ---------------------------------------------------------------------------------------- 00
NOTEBOOKS["00_environment"] = [
    md('''
    # 00 · Environment: versions, an MPI cluster of engines, shared memory

    **Question.** Does this machine run what the experiments need: Python, MPI
    (mpi4py on MPICH), LMDB, an ipyparallel cluster whose engines share one
    `MPI_COMM_WORLD`, and MPI-3 shared-memory windows?

    **The papers' setting.** LMDBIO ran inside Caffe on up to 9,216 cores
    (256 nodes x 36 cores) over a parallel file system. Its first optimization
    (LMM) hands records to the other ranks of a node through an MPI-3
    shared-memory window (`MPI_Win_allocate_shared` on the
    `MPI_COMM_TYPE_SHARED` communicator); this notebook checks that window
    works here before anything else relies on it.

    Every later notebook measures the same way: the client starts **one**
    cluster of `n` MPI engines and runs each point on the first `P` engines
    over a sub-communicator (`COMM_WORLD.Split`), so one cluster serves
    P = 1..n. LMDB is opened on the engines only.
    '''),
    params('''
    n_engines = None    # None: the scale's default (tiny 2, default 4, large 72)
    '''),
    code(SETUP),
    resolve('''{
        "tiny": {"n_engines": 2},
        "default": {"n_engines": 4},
        "large": {"n_engines": 72},
    }''', "00_environment", "n_engines=n_engines"),
    md('''
    ## Versions in the client
    '''),
    code('''
    from lmdbio.notebook_runner import host_meta

    host = host_meta()
    pd.Series(host, name="client")
    '''),
    md('''
    ## Start the cluster; ask every engine where it runs; check a shared window

    `check_shared_memory` (in `lmdbio.cluster`) allocates one window owned by
    node rank 0, lets every rank write its own slice and read all the others.
    '''),
    code('''
    from lmdbio.cluster import check_shared_memory, engine_info

    if RUN:
        with MPICluster(n=cfg["n_engines"]) as cluster:
            engines = pd.DataFrame(cluster.run(engine_info, cfg["n_engines"]))
            shm = pd.DataFrame(cluster.run(check_shared_memory, cfg["n_engines"]))
            start_s = cluster.start_seconds
        save_results(RESULTS, {"engines": engines, "shared_memory": shm},
                     {**cfg, "cluster_start_s": round(start_s, 2)})
    engines = plots.load(RESULTS, "engines.csv")
    shm = plots.load(RESULTS, "shared_memory.csv")
    meta = plots.machine(RESULTS)
    print(f"cluster of {len(engines)} engines started in {meta['config'].get('cluster_start_s')} s")
    display(engines)
    display(shm)
    '''),
    code('''
    fig = plots.environment(shm, meta)
    plots.save(fig, "00_environment", FIGURES)
    '''),
    md('''
    ## What this shows

    Every engine reports the same `COMM_WORLD` size, the same MPI library and
    LMDB version, and every rank saw every other rank's slice of one shared
    window, so LMM's mechanism works here. The copy bandwidth from a
    neighbour's slice is memory bandwidth (GB/s), far above what any reader
    in these experiments reaches from storage.

    **Limits of this machine.** It has 2 cores and one local disk: all
    engines are one "node", and with more than 2 engines they time-share the
    cores. Where later notebooks need several nodes they split the engines
    into *virtual* nodes (`ranks_per_node`), which exercises the code paths
    but not a network or a parallel file system.
    '''),
]

# ---------------------------------------------------------------------------------------- 01
NOTEBOOKS["01_datasets"] = [
    md('''
    # 01 · Datasets: Caffe-style LMDBs, their pages and their records

    **Question.** What do the databases the experiments read look like on
    disk: which pages hold what, and how big is a record?

    **The papers' setting.** Caffe's `convert_imageset` writes one `Datum`
    protobuf per image under key `%08d_<filename>`, committing every 1,000
    records. ImageNet records are 256x256x3 raw pixels, about 196 KB; CIFAR-10
    records about 3 KB. LMDB keeps every value larger than about half a page
    in its own run of *overflow* pages, so the file is a long sequence of
    overflow runs with a leaf page now and then, plus the pages that each
    commit's copy-on-write left free. The PROV optimization (notebook 06)
    predicts exactly this layout arithmetically.

    The datasets are synthetic (smooth random images with noise, seeded):
    their sizes and layout match the papers', their pixels do not matter here.
    '''),
    params('''
    datasets = None     # None: the scale's {name: (preset, records)}
    '''),
    code(SETUP),
    resolve("{k: {'datasets': v} for k, v in DATASETS_BY_SCALE.items()}", "01_datasets",
            "datasets=datasets", prelude="DATASETS_BY_SCALE = " + DATASETS),
    datasets_cell(),
    md('''
    ## Make the datasets and describe them (on an engine)

    `describe_datasets` walks each file with our own parser
    (`lmdbio.format`, `lmdbio.index`): the branch pages reachable from the
    root, every leaf page, every overflow run; what is left is free.
    '''),
    code('''
    from lmdbio.cluster import describe_datasets

    if RUN:
        with MPICluster(n=1) as cluster:
            made = ensure_datasets(cluster, specs)
            desc = describe_datasets(cluster, {s["path"].rsplit("/", 1)[-1]: s["path"] for s in specs})
        save_results(RESULTS, {
            "pages": pd.concat([d["pages"] for d in desc.values()]),
            "records": pd.concat([d["records"] for d in desc.values()]),
            "summary": pd.DataFrame([d["summary"] for d in desc.values()]),
        }, cfg)
    meta = plots.machine(RESULTS)
    summary = plots.load(RESULTS, "summary.csv")
    summary.drop(columns=["path"])
    '''),
    code('''
    pages = plots.load(RESULTS, "pages.csv")
    fig = plots.page_map(pages, meta)
    plots.save(fig, "01_datasets_pages", FIGURES)
    '''),
    code('''
    records = plots.load(RESULTS, "records.csv")
    fig = plots.record_sizes(records, meta)
    plots.save(fig, "01_datasets_record_sizes", FIGURES)
    '''),
    md('''
    ## What this shows

    Both files are almost entirely overflow pages (blue): every record,
    CIFAR-10 (3 KB, one page) and ImageNet (196 KB, 49 pages) alike, has its
    own overflow run, so record *i*'s bytes are one contiguous range but not
    at an offset proportional to *i*: leaf pages (yellow) interrupt the runs
    every few dozen records, and each commit leaves a few freed pages
    (light grey) behind. All records of a dataset have the same size (raw
    pixels), as in the papers; the JPEG variant (`--encoded`) would spread
    them out. This layout is what makes PROV's arithmetic possible and what
    makes it fragile (notebook 06).
    '''),
]


if __name__ == "__main__":
    for name, cells in NOTEBOOKS.items():
        print(write(name, cells).relative_to(HERE.parent))
