"""Write the notebooks NN_*.ipynb (without outputs) from the cell texts below.

    .venv/bin/python notebooks/_make_notebooks.py

The .ipynb files are the product and are committed; this script is how they
are kept consistent (same parameters cell, same setup, same closing). Edit
here, regenerate, commit both.
"""

from __future__ import annotations

import pprint
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

import lmdbio
import pandas as pd
from IPython.display import display

from lmdbio import plots
from lmdbio.cluster import MPICluster
from lmdbio.experiments import ensure_datasets
from lmdbio.notebook_runner import save_results
EXTRA
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
    for i, c in enumerate(nb.cells):
        c.id = f"{name[:2]}-{i:02d}"   # stable ids: regenerating changes only what changed
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
    code(SETUP.replace("EXTRA\n", "")),
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
    from lmdbio.experiments import check_shared_memory, engine_info

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
    code(SETUP.replace("EXTRA\n", "")),
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
    from lmdbio.experiments import describe_datasets

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



# ------------------------------------------------------------------ the bench-based notebooks
# Engines, process counts, iterations and repeats per scale. Every batch size
# is a multiple of every process count of its scale.
BENCH_SCALES = {
    "tiny": {"n_engines": 2, "procs": [1, 2], "iters": 3, "repeats": 1,
             "datasets": {"cifar10": ("cifar10", 512), "imagenet": ("imagenet", 48)}},
    "default": {"n_engines": 8, "procs": [1, 2, 4, 8], "iters": 32, "repeats": 3,
                "datasets": {"cifar10": ("cifar10", 60000), "imagenet": ("imagenet", 2000)}},
    "large": {"n_engines": 72, "procs": [1, 2, 4, 8, 16, 36, 72], "iters": 64, "repeats": 3,
              "datasets": {"cifar10": ("cifar10", 1_000_000), "imagenet": ("imagenet", 100_000)}},
}


def scales(**per_scale: dict) -> str:
    """BENCH_SCALES with per-scale overrides, as the source of a dict literal."""
    out = {k: {**v, **per_scale.get(k, {})} for k, v in BENCH_SCALES.items()}
    return pprint.pformat(out, width=100, sort_dicts=False)

BENCH_PARAMS = '''
n_engines = None    # None: the scale's default (tiny 2, default 8, large 72)
procs = None        # process counts P, each a sub-communicator of the engines
iters = None        # timed iterations per point
repeats = None      # repeats per point
datasets = None     # {name: (preset, records)}
'''

BENCH_KEYS = "n_engines=n_engines, procs=procs, iters=iters, repeats=repeats, datasets=datasets"

BENCH_SETUP = SETUP.replace("EXTRA", "from lmdbio.bench import write_results\nfrom lmdbio.experiments import sweep")


def bench_head(name: str):
    return [params(BENCH_PARAMS), code(BENCH_SETUP), resolve(scales(), name, BENCH_KEYS),
            datasets_cell(), code('''
    ds = {s["path"].rsplit("/", 1)[-1]: s["path"] for s in specs}
    P = cfg["procs"]
    ''')]


def measure(points: str, extra_after: str = "", runner: str = "sweep", writer: str = "bench"):
    """The RUN cell: one cluster, the datasets, the points, the results files."""
    write = ("write_results(RESULTS, rows, cfg)" if writer == "bench"
             else 'save_results(RESULTS, {"rows": pd.DataFrame(rows)}, cfg)')
    first, rest = points.strip().split("\n", 1)
    pts = first + "\n" + textwrap.indent(textwrap.dedent(rest), " " * 4)
    body = (
        "if RUN:\n"
        f"    points = {pts}\n"
        '    with MPICluster(n=cfg["n_engines"]) as cluster:\n'
        "        ensure_datasets(cluster, specs)\n"
        f"        rows = {runner}(cluster, points)\n"
        f"    {write}\n"
        "meta = plots.machine(RESULTS)\n"
        + textwrap.dedent(extra_after).strip("\n"))
    return new_code_cell(body)


# ---------------------------------------------------------------------------------------- 02
NOTEBOOKS["02_lmdb_analysis"] = [
    md('''
    # 02 · Why LMDB is slow when many processes read it

    **Question.** Where does an emulated training iteration spend its time
    when every process reads its share of the batch from LMDB the way Caffe
    does (each rank maps the file and walks a cursor), and which of the
    papers' three process-level problems show up on this machine?

    **The papers' claims** (TOPC 2019, HPCC 2017): I/O takes up to 90% of
    training time at scale; (1) mmap page faults put waiting processes to
    sleep and wake them all, so sleep time and context switches grow with the
    processes per node; (2) a cursor only walks, so each rank walks past all
    earlier ranks' records: the seek cost grows with the rank count; (3) the
    data arrives in implicit page-sized faults the application cannot size.

    **How.** `lmdbio.bench.run_point` on the engines: variant `lmdb`
    (Caffe's pattern), cold page cache (the file is evicted after a warmup
    batch), compute emulated as a sleep of AlexNet's per-sample time on one
    V100-class GPU (an assumption, see `lmdbio.emulation`) plus a 1 MB
    gradient allreduce.
    '''),
    *bench_head("02_lmdb_analysis"),
    measure('''[
            # time breakdown, contention, request sizes: ImageNet-size records, cold cache
            *[dict(nprocs=p, dataset=ds["imagenet"], variant=v, batch_size=16 if scale == "tiny" else 32,
                   iters=cfg["iters"], cache="cold", compute_time="alexnet", model_bytes="1MB", repeat=r)
              for p in P for v in ("lmdb", "lmdbio-lmm-dio") for r in range(cfg["repeats"])],
            # cursor seek cost: small records, warm cache so the walk is what is timed
            *[dict(nprocs=p, dataset=ds["cifar10"], variant="lmdb", batch_size=64 if scale == "tiny" else 256,
                   iters=cfg["iters"], cache="warm", repeat=r)
              for p in P for r in range(cfg["repeats"])],
        ]''', '''
    summary = plots.load(RESULTS, "summary.csv")
    pts = plots.load(RESULTS, "points.csv")
    summary.groupby(["dataset_name", "variant", "nprocs", "cache"])[
        ["records_per_s", "mb_per_s", "read_s", "wait_s", "compute_s", "au", "resident_fraction"]].mean()
    '''),
    md('''
    ## Time breakdown of an emulated training iteration (LMDB, cold cache)
    '''),
    code('''
    lm = summary[(summary["variant"] == "lmdb") & (summary["dataset_name"] == "imagenet")]
    fig = plots.time_breakdown(lm, meta)
    plots.save(fig, "02_lmdb_time_breakdown", FIGURES)
    '''),
    md('''
    ## Problem 1: sleep time and context switches vs processes per node
    '''),
    code('''
    img = pts[pts["dataset_name"] == "imagenet"]
    fig = plots.contention(img, meta, variants=("lmdb", "lmdbio-lmm-dio"))
    plots.save(fig, "02_lmdb_contention", FIGURES)
    '''),
    md('''
    ## Problem 2: cursor seek cost vs processes
    '''),
    code('''
    fig = plots.seek_cost(pts[pts["dataset_name"] == "cifar10"], meta)
    plots.save(fig, "02_lmdb_seek_cost", FIGURES)
    '''),
    md('''
    ## Problem 3: how many requests, how big
    '''),
    code('''
    fig = plots.io_requests(img, meta)
    plots.save(fig, "02_lmdb_io_requests", FIGURES)
    '''),
    md('''
    ## What the figures show
    CONCLUSION_02
    '''),
]


def opt_notebook(name: str, title: str, question: str, mechanism: str, diagram: str, points: str,
                 mech: str, conclusion: str, extra_cells: list | None = None):
    return [
        md(f"# {title}\n\n" + textwrap.dedent(question).strip() + "\n\n## The mechanism\n\n"
           + textwrap.dedent(mechanism).strip() + "\n\n```text\n" + textwrap.dedent(diagram).strip("\n")
           + "\n```"),
        *bench_head(name),
        measure(points, '''
    summary = plots.load(RESULTS, "summary.csv")
    pts = plots.load(RESULTS, "points.csv")
    summary.groupby(["variant", "nprocs", "cache"])[
        ["records_per_s", "mb_per_s", "speedup_vs_lmdb", "fraction_of_limit", "cpu_s_per_gb"]].mean()
    '''),
        code(textwrap.dedent(mech).strip()),
        *(extra_cells or []),
        md("## What the figure shows\n\n" + textwrap.dedent(conclusion).strip()),
    ]


def opt_points(variants: str, dataset: str, tiny_batch: int, batch: int, rpn: str = "None",
               caches: str = '("cold", "warm")') -> str:
    return f'''[
            dict(nprocs=p, dataset=ds["{dataset}"], variant=v, cache=c, iters=cfg["iters"], repeat=r,
                 batch_size={tiny_batch} if scale == "tiny" else {batch}, ranks_per_node={rpn})
            for p in P for v in {variants} for c in {caches} for r in range(cfg["repeats"])
        ]'''


NOTEBOOKS["03_lmm"] = opt_notebook(
    "03_lmm", "03 · LMM: localized mmap, one reader per node",
    '''
    **Question.** If one process per node reads the node's whole share and
    hands records to the others through shared memory, do the sleep time and
    context switches of problem 1 go away, and does reading get faster?

    **The paper's claim** (HPCC 2017): LMDBIO-LMM improves Caffe's total
    time by up to about 20x at scale, because only one process per node takes
    page faults.
    ''',
    '''
    The ranks of a node (`MPI_COMM_TYPE_SHARED`) elect a reader. The reader
    maps the file, walks the cursor over the node's records and copies them
    into an MPI-3 shared window; after a node barrier every rank takes its
    records from the window as zero-copy views. Compared with LMDB, the
    node's other ranks never touch the file.
    ''',
    '''
    LMDB (Caffe)                          LMDBIO-LMM
    rank0 --mmap/fault--> data.mdb        rank0 (reader) --mmap/fault--> data.mdb
    rank1 --mmap/fault--> data.mdb          |  copy into shared window
    rank2 --mmap/fault--> data.mdb          v
    rank3 --mmap/fault--> data.mdb        [ MPI_Win_allocate_shared ] <-- rank1, rank2, rank3 read views
    ''',
    opt_points('("lmdb", "lmdbio-lmm")', "imagenet", 16, 32),
    '''
    mech = plots.per_iteration(pts[pts["cache"] == "cold"], "step", ["total"], ["vcsw", "ivcsw", "sleep_s"])
    fig = plots.optimization(summary, ["lmdb", "lmdbio-lmm"], mech, meta, mech_col="vcsw_sum",
                             mech_label="voluntary context switches per iteration, all ranks (cold)",
                             title="LMM vs LMDB: throughput and context switches")
    plots.save(fig, "03_lmm", FIGURES)
    ''',
    "CONCLUSION_03")

NOTEBOOKS["04_dm"] = opt_notebook(
    "04_dm", "04 · DM: the cursor handed around a ring of readers, plus speculative reads",
    '''
    **Question.** With several readers, each LMM reader still walks its
    cursor past the records of every reader before it. If the readers pass a
    portable cursor position around a ring instead, does each walk only its
    own records, and does that pay?

    **The paper's claim** (ICPADS 2017): LMDBIO-DM is about 2x faster than
    LMDBIO-LMM and more than 30x faster than LMDB at scale.
    ''',
    '''
    Reader k receives the cursor position (a key) from reader k-1, walks only
    its own `fetch_size` records, and sends the new position to reader k+1;
    the last reader sends it back to reader 0 for the next iteration. While it
    waits, a reader asks the kernel for the pages it predicts from earlier
    iterations (`madvise(WILLNEED)`), so faults happen in parallel; missed and
    extra pages are counted. Here every rank is its own (virtual) node so
    that there are P readers.
    ''',
    '''
    LMM, P readers: reader k walks k*f records to reach its own f
    DM ring:        reader0 --pos--> reader1 --pos--> reader2 --pos--> reader3
                       ^                                                 |
                       +------------------- next iteration --------------+
    ''',
    opt_points('("lmdbio-lmm", "lmdbio-lmm-dm")', "cifar10", 64, 256, rpn="1"),
    '''
    mech = plots.per_iteration(pts[pts["cache"] == "warm"], "reader", ["locate"], ["records_walked"])
    fig = plots.optimization(summary, ["lmdbio-lmm", "lmdbio-lmm-dm"], mech, meta,
                             mech_col="records_walked_sum", mech_log=True,
                             mech_label="records walked per iteration, all readers (warm, log)",
                             title="DM vs LMM, one reader per rank: throughput and cursor walk")
    plots.save(fig, "04_dm", FIGURES)
    ''',
    "CONCLUSION_04")

NOTEBOOKS["05_dio"] = opt_notebook(
    "05_dio", "05 · DIO: direct I/O instead of mmap page faults",
    '''
    **Question.** If the reader learns where its records lie and reads them
    with a few explicit `pread` calls straight into the shared window, do the
    many small implicit faults (problem 3) disappear, and is it faster?

    **The paper's claim** (TOPC 2019): direct I/O removes mmap's page-fault
    overheads and lets the application size its requests; with the other
    optimizations it is part of the up to 65x speedup on 9,216 cores.
    ''',
    '''
    The first reader walks the record index once (branch and leaf pages only,
    with our own parser) and scatters each reader its byte extents. From
    then on a reader merges adjacent extents and issues one `pread` per
    contiguous run into the shared window; no page of the file is mapped.
    ''',
    '''
    mmap:  memcpy from map -> fault 4 KiB (+readahead) -> fault -> fault -> ...   (kernel decides)
    DIO:   index: [(off0,len0), (off1,len1), ...] -> merge -> pread(run, 1 MiB) -> shared window
    ''',
    opt_points('("lmdbio-lmm", "lmdbio-lmm-dm", "lmdbio-lmm-dio")', "imagenet", 16, 32),
    '''
    mech = plots.requests_per_iteration(pts[pts["cache"] == "cold"])
    fig = plots.optimization(summary, ["lmdbio-lmm", "lmdbio-lmm-dm", "lmdbio-lmm-dio"], mech, meta,
                             mech_col="requests_sum", mech_log=True,
                             mech_label="requests per iteration, all ranks (cold, log): "
                                        "page faults (mmap) or preads (DIO)",
                             title="DIO vs mmap: throughput and number of requests")
    plots.save(fig, "05_dio", FIGURES)
    ''',
    "CONCLUSION_05")

NOTEBOOKS["06_prov"] = opt_notebook(
    "06_prov", "06 · PROV: offsets from how the file was written",
    '''
    **Question.** DIO still needs one pass over the index before the first
    read. If the reader knows how the database was written, can it compute
    every record's offset with no pass at all, and where does the paper's
    arithmetic model of the file break?

    **The paper's claim** (TOPC 2019): with provenance (records per leaf,
    keys per branch, pages per record, commit interval) each reader computes
    its offsets arithmetically, removing the sequential pass of problem 2.
    ''',
    '''
    Our PROV reads a small provenance sidecar written with the dataset (a
    run-length encoding of record extents, checked against the file's meta
    page) instead of walking the tree: every reader decodes its own extents
    directly. Next to it we evaluate the paper's purely *arithmetic* model
    (`lmdbio.provenance.arithmetic_offsets`, after the reference
    `compute_data_offsets`) against the true offsets from the index walk.
    ''',
    '''
    DIO:  reader0 walks index (all leaf pages) --scatter extents--> readers --pread-->
    PROV: every reader: sidecar (runs: start, base, stride) --decode own range--> pread
    model: offset(i) = f(i, records/leaf, keys/branch, pages/record, commit interval)
    ''',
    opt_points('("lmdbio-lmm-dio", "lmdbio-lmm-dio-prov")', "cifar10", 64, 256, rpn="1"),
    '''
    setup = pts[(pts["level"] == "setup") & (pts["phase"] == "setup")]
    mech = (setup.groupby(["variant", "nprocs", "cache", "repeat"], as_index=False)["wall_s"].max()
            .groupby(["variant", "nprocs"], as_index=False)["wall_s"].mean())
    mech["setup_ms"] = mech["wall_s"] * 1e3
    fig = plots.optimization(summary, ["lmdbio-lmm-dio", "lmdbio-lmm-dio-prov"], mech, meta,
                             mech_col="setup_ms", mech_label="reader setup (ms, slowest rank): "
                             "index pass + scatter vs provenance",
                             title="PROV vs DIO, one reader per rank: throughput and setup")
    plots.save(fig, "06_prov", FIGURES)
    ''',
    "CONCLUSION_06",
    extra_cells=[
        md('''
        ## The paper's arithmetic model against the truth

        Both datasets were written as Caffe does, one commit every 1,000
        records. The model knows the commit interval; the grey line is the
        same model as if one transaction had written everything.
        '''),
        code('''
        from lmdbio.experiments import prov_model_table

        if RUN:
            with MPICluster(n=1) as cluster:
                tables = [cluster.apply(prov_model_table, path, 1000).assign(dataset=name)
                          for name, path in ds.items()]
            save_results(Path(results_root) / "06_prov_model", {"model": pd.concat(tables)}, cfg)
        model = plots.load(Path(results_root) / "06_prov_model", "model.csv")
        fig = plots.prov_model(model, plots.machine(Path(results_root) / "06_prov_model"))
        plots.save(fig, "06_prov_model", FIGURES)
        '''),
    ])

NOTEBOOKS["07_coal"] = [
    md('''
    # 07 · COAL: one large read for several iterations

    **Question.** One iteration's share per reader is small (here about
    0.8 MB of CIFAR-10 records per iteration). If a reader reads several
    iterations' data in one request, how does throughput change with the
    request size?

    **The paper's claim** (TOPC 2019, problem 4): parallel file systems serve
    MiB-sized requests efficiently; coalescing to about 4 MiB (the reference
    default, rounded to a power of two of iterations) removes the size
    mismatch.

    ## The mechanism

    The reader allocates a shared window for `k` iterations, reads
    `k` iterations' extents in one pass of large `pread`s, then serves the
    next `k - 1` iterations from memory with no I/O at all.

    ```text
    no COAL:  it0: pread 0.8 MB | it1: pread 0.8 MB | it2: pread 0.8 MB | it3: pread 0.8 MB
    COAL 4M:  it0: pread 3.2 MB (it0..it3)          | it1: memory | it2: memory | it3: memory
    ```

    The runs below use `lmdbio.experiments.reader_timeline` (the Reader itself,
    per-batch rows), because the sweep varies `coalesce_bytes`. There is no
    warmup batch: the file is evicted right after the readers are built, and
    the first timed batch does the first coalesced read.
    '''),
    params(BENCH_PARAMS + '''coalesce_sizes = None   # request targets in bytes'''),
    code(SETUP.replace("EXTRA", "from lmdbio.experiments import sweep_timelines")),
    resolve(scales(tiny=dict(iters=8, coalesce_sizes=[1 << 16, 1 << 18]),
                   default=dict(iters=48, coalesce_sizes=[1 << 18, 1 << 20, 1 << 22, 1 << 24]),
                   large=dict(iters=128, coalesce_sizes=[1 << 20, 1 << 22, 1 << 24, 1 << 26])),
            "07_coal", BENCH_KEYS + ", coalesce_sizes=coalesce_sizes"),
    datasets_cell(),
    code('''
    ds = {s["path"].rsplit("/", 1)[-1]: s["path"] for s in specs}
    P = cfg["procs"]
    '''),
    measure('''[
            dict(nprocs=p, dataset=ds["cifar10"], variant=v, batch_size=64 if scale == "tiny" else 256,
                 iters=cfg["iters"], warmup=0, cache="cold", coalesce_bytes=c)
            for p in P
            for v, c in [("lmdbio-lmm-dio-prov", None)]
                        + [("lmdbio-lmm-dio-prov-coal", c) for c in cfg["coalesce_sizes"]]
        ]''', '''
    rows = plots.load(RESULTS, "rows.csv")
    per_point = rows.drop_duplicates(["variant", "nprocs", "coalesce_bytes"])
    per_point.assign(mb_per_s=per_point["record_bytes"] / per_point["wall_s_total"] / 1e6)[
        ["variant", "nprocs", "coalesce_bytes", "wall_s_total", "mb_per_s", "resident_fraction"]]
    ''', runner="sweep_timelines", writer="own"),
    code('''
    fig = plots.coalescing(rows, meta)
    plots.save(fig, "07_coal", FIGURES)
    '''),
    md('''
    ## What the figure shows

    CONCLUSION_07
    '''),
]

NOTEBOOKS["08_stag"] = [
    md('''
    # 08 · STAG: readers take turns at the storage

    **Question.** When every reader hits the file system at the same moment
    (problem 5), do they slow each other down, and does letting one group of
    readers at a time read (staggering) help?

    **The paper's claim** (TOPC 2019): with many readers on a parallel file
    system, storage contention costs more than the waiting; staggering
    groups of readers (the last optimization of LMDBIO-LMM-DIO-PROV-COAL-STAG)
    improves the read time at the largest scales.

    ## The mechanism

    Readers are split into groups of `stagger_size`. Group g waits for a
    message from the same position in group g-1 before reading and notifies
    group g+1 after, so at most one group reads at a time.

    ```text
    no STAG: reader0 ████        STAG (groups of 2): reader0 ████
             reader1 ████                            reader1 ████
             reader2 ████                            reader2 ····████
             reader3 ████                            reader3 ····████   (···· = stagger_wait)
    ```

    Every rank is its own (virtual) node here, so all P ranks are readers;
    the timelines are of the largest P, cold cache, ImageNet-size records.
    '''),
    params(BENCH_PARAMS + '''stagger_size = None   # readers per stagger group (None: the scale's)'''),
    code(SETUP.replace("EXTRA", "from lmdbio.experiments import sweep_timelines")),
    resolve(scales(tiny=dict(iters=4, stagger_size=1), default=dict(iters=24, stagger_size=2),
                   large=dict(iters=32, stagger_size=8)),
            "08_stag", BENCH_KEYS + ", stagger_size=stagger_size"),
    datasets_cell(),
    code('''
    ds = {s["path"].rsplit("/", 1)[-1]: s["path"] for s in specs}
    p_max = max(cfg["procs"])
    '''),
    measure('''[
            dict(nprocs=p_max, dataset=ds["imagenet"], variant=v, batch_size=2 * p_max if scale == "tiny"
                 else 4 * p_max, iters=cfg["iters"], warmup=0, cache="cold", ranks_per_node=1,
                 stagger_size=cfg["stagger_size"] if v.endswith("stag") else None)
            for v in ("lmdbio-lmm-dio-prov-coal", "lmdbio-lmm-dio-prov-coal-stag")
        ]''', '''
    rows = plots.load(RESULTS, "rows.csv")
    rows.drop_duplicates("variant")[["variant", "nprocs", "stagger_size", "wall_s_total", "records",
                                     "record_bytes", "resident_fraction"]]
    ''', runner="sweep_timelines", writer="own"),
    code('''
    fig = plots.timelines(rows, meta)
    plots.save(fig, "08_stag", FIGURES)
    '''),
    md('''
    ## What the figure shows

    CONCLUSION_08
    '''),
]

NOTEBOOKS["09_scaling"] = [
    md('''
    # 09 · All seven variants vs processes

    **Question.** Stacking the optimizations one by one, how does the time to
    read a fixed number of iterations change with the number of processes,
    and how close does each variant get to the limit of plain `pread`s?

    **The papers' claim** (poster 2018, TOPC 2019): the headline figure, log
    time vs processes from 1 to 9,216, with LMDB's time growing with the
    process count and the full LMDBIO stack up to 65-77x faster.

    **How.** `run_point` for every variant plus `raw` (the pread limit: the
    same extents with no LMDB work, no distribution), cold cache, CIFAR-10
    records, no compute emulation: the y axis is read time only.
    '''),
    *bench_head("09_scaling"),
    measure('''[
            dict(nprocs=p, dataset=ds["cifar10"], variant=v, batch_size=64 if scale == "tiny" else 256,
                 iters=cfg["iters"], cache="cold", repeat=r)
            for p in P for v in (*lmdbio.VARIANTS, "raw") for r in range(cfg["repeats"])
        ]''', '''
    summary = plots.load(RESULTS, "summary.csv")
    '''),
    code('''
    fig = plots.scaling(summary, meta, title="Reading CIFAR-10 batches, cold cache: all variants vs processes")
    plots.save(fig, "09_scaling", FIGURES)
    '''),
    md('''
    ## Speedup over LMDB (LMDB's time / the variant's time, mean of repeats)
    '''),
    code('''
    table = plots.speedup_table(summary)
    table.to_csv(RESULTS / "speedup.csv")
    table
    '''),
    md('''
    ## What the figure shows

    CONCLUSION_09
    '''),
]

NOTEBOOKS["10_training"] = [
    md('''
    # 10 · Emulated end-to-end training: LMDB vs full LMDBIO

    **Question.** With the model replaced by its compute time and gradient
    allreduce, how long does training take and how busy is the accelerator
    (AU = compute time / wall time) with LMDB and with the full LMDBIO stack?

    **The papers' claim** (TOPC 2019): I/O can be up to 90% of training time
    with LMDB; LMDBIO brings Caffe's total time down by up to 65x on 9,216
    cores.

    **How.** `run_point` with `compute_time="alexnet"` (0.33 ms per sample,
    an assumed V100-class rate) and a 4 MB allreduce per iteration (a
    stand-in: AlexNet's 244 MB would swamp 2 cores), ImageNet-size records,
    cold cache.
    '''),
    *bench_head("10_training"),
    measure('''[
            dict(nprocs=p, dataset=ds["imagenet"], variant=v, batch_size=16 if scale == "tiny" else 32,
                 iters=cfg["iters"], cache="cold", compute_time="alexnet", model_bytes="4MB", repeat=r)
            for p in P for v in ("lmdb", "lmdbio-lmm-dio-prov-coal-stag") for r in range(cfg["repeats"])
        ]''', '''
    summary = plots.load(RESULTS, "summary.csv")
    summary.groupby(["variant", "nprocs"])[["wall_s", "compute_s", "read_s", "comm_s", "wait_s", "au"]].mean()
    '''),
    code('''
    fig = plots.training(summary, meta)
    plots.save(fig, "10_training", FIGURES)
    '''),
    md('''
    ## What the figure shows

    CONCLUSION_10
    '''),
]

NOISE = ("The committed default-scale results were measured on an otherwise idle 2-core VM with a "
         "local virtual disk (`make reproduce`); every point reads for only tens of milliseconds, so "
         "run-to-run noise is large (see the error bars). The numbers quoted here are those of the "
         "committed run; a rerun moves them, so read the directions and ratios, not the digits.")

CONCLUSIONS = {
    "CONCLUSION_02": """
    - **Time breakdown.** Reading takes 38% of an iteration at P=1 and 15-23% at P=2..8 here, not the
      papers' up to 90%: a cold read from this local disk is fast, there is no parallel file system,
      and with 8 processes on 2 cores the emulated 1 MB allreduce dominates. The papers' share needs
      their storage and scale; this machine cannot show it.
    - **Problem 1.** Sleep time and involuntary context switches grow steeply with processes per
      node, and more for LMDB than for LMDBIO-LMM-DIO (the figure has this run's counts). Here
      that growth is mostly oversubscription (8 processes, 2 cores), so it
      agrees with the papers' direction but is not a clean measure of mmap's wake-ups.
    - **Problem 2.** Exactly as the papers say: every LMDB rank walks the whole global batch (256
      records) every iteration to keep B/P of them, P times more than it needs. The walk costs a
      fraction of a millisecond with a warm cache at this size; it matters at the papers' scale.
    - **Problem 3.** LMDB's data arrives in tens to hundreds of page faults per iteration, each
      bringing in tens of KiB (kernel readahead), while direct I/O reads the same bytes in one
      request per iteration of about 6 MiB: the papers' point, clearly visible here.

    """ + NOISE,
    "CONCLUSION_03": """
    LMM cuts the context switches of the timed loop relative to LMDB, as the paper's problem 1
    predicts (see the table above for this run's counts). Its throughput gain is not visible on
    one 2-core node: LMDB with a warm cache is faster (every rank copies from the page cache in
    parallel on both cores while one LMM reader copies for all), and with a cold cache the two are
    close (LMM 1.1x at P=1, 0.7-0.8x at P=2..8 in the committed run).
    The paper's 20x came from many nodes of 36 cores on a parallel file system, where one reader
    per node removes real contention; a single node with a local disk cannot show it.

    """ + NOISE,
    "CONCLUSION_04": """
    The mechanism works as described: with the ring, the readers together walk exactly the 256
    records of a batch per iteration at every P, while LMM's readers walk 256 x P (2,048 at P=8),
    a P-fold saving. The throughput does not follow here: at this size the walk costs well under a
    millisecond, and passing the cursor position serializes the readers on 2 shared cores, so DM is
    not faster than LMM on this machine (the paper's 2x over LMM is at hundreds of readers).

    """ + NOISE,
    "CONCLUSION_05": """
    The request count is the paper's problem 3 made visible: the mmap variants take about 300 page
    faults per iteration over all ranks (cold), DIO issues one `pread` per iteration for the same
    bytes. DIO is the fastest of the three at P=1 (about 1.3x LMDB cold in the committed run) and
    close to LMDB at P=2..8 (0.9-1.05x), where one reader competes for 2 cores with the others.

    """ + NOISE,
    "CONCLUSION_06": """
    PROV removes the index pass: the slowest reader's setup falls from about 95 ms to 20 ms at P=8
    (11 to 3 ms at P=1). The per-iteration throughput is about DIO's, as expected, since both
    then issue the same reads. The second figure shows where the paper's purely arithmetic model
    breaks: it is exact for ImageNet-size records here and for any single-transaction write, but
    with a commit every 1,000 records LMDB's reuse of freed pages differs from the model, and for
    CIFAR-10 only 7% of the offsets are exact (errors up to about 2,000 pages). This is why our
    PROV stores measured extents in a sidecar instead of trusting the arithmetic.

    """ + NOISE,
    "CONCLUSION_07": """
    Coalescing does not raise throughput consistently here: a 1 MiB target helps at P=1 in the
    committed run, but 16 MiB requests are slower at every P (one reader copies more at once while
    the other ranks wait), and at P=2..8 the lines are flat within the noise. The paper's gain
    comes from parallel file
    systems that serve MiB-sized requests far better than small ones; a local disk with kernel
    readahead already serves 0.8 MB requests at its speed, so this machine cannot show problem 4.

    """ + NOISE,
    "CONCLUSION_08": """
    The timelines show the mechanism exactly: without STAG all 8 readers read at once; with groups
    of 2 only one group reads at a time and the others wait (orange). On this machine staggering
    makes the run slower (0.19 s vs 0.13 s for 24 iterations in the committed run), because a local
    disk and 2
    cores suffer little from 8 concurrent readers. The paper's benefit needs a shared parallel file
    system under many nodes; here the effect cannot appear.

    """ + NOISE,
    "CONCLUSION_09": """
    The poster's headline shape (LMDB's time growing with processes, the full LMDBIO stack 65-77x
    faster) does **not** appear on this machine. All eight lines lie within a factor of about 2 of
    each other; in the committed run the speedup table ranges from 0.47 to 1.24 (the full stack
    0.65-1.24), and even the `raw` pread limit, which does no LMDB work and no distribution, is
    only 0.7-1.2x LMDB. With 60,000 small records on a local disk, 32 iterations take 30-70 ms in
    total, so start-up effects and the noise of 8 processes on 2 shared cores dominate. The
    figure shows the method and the plumbing; the papers' effect needs their storage and scale.

    """ + NOISE,
    "CONCLUSION_10": """
    With AlexNet-rate compute, AU is about 0.75 for both at P=1 and falls to about 0.1 at P=8: on
    2 cores, more processes mean less compute per process (the global batch is split) while
    reading, synchronizing and the allreduce do not shrink. LMDBIO does not raise AU here; at
    P=2..4 it is lower than LMDB's in the committed run (one reader serves ranks that share its two
    cores). The papers' claim that LMDBIO turns an I/O-bound
    run into a compute-bound one at scale cannot be tested on one 2-core machine.

    """ + NOISE,
}


def _fill(cells):
    for c in cells:
        if c.cell_type == "markdown":
            for k, v in CONCLUSIONS.items():
                c.source = c.source.replace(k, textwrap.dedent(v).strip().replace("\n    ", "\n"))
    return cells

if __name__ == "__main__":
    for name, cells in NOTEBOOKS.items():
        print(write(name, _fill(cells)).relative_to(HERE.parent))
