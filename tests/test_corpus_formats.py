"""The ecosystem's corpus formats (`electra.data.formats`): Parquet, zstd JSON lines and a
`datasets` save_to_disk folder, built here from real text (NLTK's inaugural addresses, JSON
lines in ../shared/data). Each must give the documents of the JSON lines, in their order, and so
the same shards; pre-training on them runs and resumes; bad input is one line naming the file
and row, with nothing written under OUT."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow", reason="needs the corpora extra (pyarrow)")
pq = pytest.importorskip("pyarrow.parquet", reason="needs the corpora extra (pyarrow)")
zstandard = pytest.importorskip("zstandard", reason="needs the corpora extra (zstandard)")

from conftest import SHARED_DATA  # noqa: E402

from electra.config import PretrainConfig, merge  # noqa: E402
from electra.data.corpus import iter_documents  # noqa: E402
from electra.data.prepare import prepare_corpus  # noqa: E402
from electra.errors import ElectraError  # noqa: E402
from electra.pretraining.loop import pretrain  # noqa: E402

SOURCE = SHARED_DATA / "corpus" / "nltk" / "inaugural.jsonl.gz"
pytestmark = pytest.mark.skipif(not SOURCE.is_file(), reason=f"needs {SOURCE}")
DOCS = 24  # the first addresses: enough text for a few hundred examples, quick to tokenize


@pytest.fixture(scope="module")
def texts() -> list[str]:
    with gzip.open(SOURCE, "rt") as f:
        return [json.loads(line)["text"] for line, _ in zip(f, range(DOCS), strict=False)]


def write_jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(texts)))
    return path


def write_zstd(path: Path, texts: list[str], frames: int = 3) -> Path:
    """JSON lines in several zstd frames, as large dumps are written."""
    lines = [json.dumps({"text": t}) + "\n" for t in texts]
    step = -(-len(lines) // frames)
    path.write_bytes(b"".join(zstandard.ZstdCompressor().compress("".join(
        lines[i:i + step]).encode()) for i in range(0, len(lines), step)))
    return path


def write_parquet(path: Path, texts: list[str], row_group_size: int = 5) -> Path:
    pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), path,
                   row_group_size=row_group_size)
    return path


def write_arrow_dataset(folder: Path, texts: list[str], files: int = 2) -> Path:
    """The layout `datasets.Dataset.save_to_disk` writes: Arrow stream files named by
    state.json, which lists them in order, and dataset_info.json."""
    folder.mkdir(parents=True)
    table = pa.table({"text": texts, "id": list(range(len(texts)))})
    step = -(-len(texts) // files)
    names = []
    for k, start in enumerate(range(0, len(texts), step)):
        name = f"data-{k:05d}-of-{files:05d}.arrow"
        with pa.OSFile(str(folder / name), "wb") as sink, \
                pa.ipc.new_stream(sink, table.schema) as writer:
            for batch in table.slice(start, step).to_batches(max_chunksize=4):
                writer.write_batch(batch)
        names.append(name)
    (folder / "state.json").write_text(json.dumps({
        "_data_files": [{"filename": n} for n in names], "_fingerprint": "0",
        "_format_columns": None, "_format_kwargs": {}, "_format_type": None,
        "_output_all_columns": False, "_split": "train"}))
    (folder / "dataset_info.json").write_text(json.dumps({"features": {
        "text": {"dtype": "string", "_type": "Value"}, "id": {"dtype": "int64",
                                                              "_type": "Value"}}}))
    return folder


FORMATS = {
    "jsonl.zst": lambda d, t: write_zstd(d / "corpus.jsonl.zst", t),
    "parquet": lambda d, t: write_parquet(d / "corpus.parquet", t),
    "datasets folder": lambda d, t: write_arrow_dataset(d / "saved", t),
}


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_documents_match_the_json_lines_in_order(fmt, texts, tmp_path):
    reference = [d.text for d in iter_documents([write_jsonl(tmp_path / "c.jsonl", texts)])]
    path = FORMATS[fmt](tmp_path, texts)
    docs = list(iter_documents([path]))
    assert [d.text for d in docs] == reference
    assert len(reference) == DOCS
    if fmt == "parquet":
        assert [d.line for d in docs] == list(range(1, DOCS + 1))  # rows
    if fmt == "datasets folder":  # rows of each Arrow file, which is named
        half = DOCS // 2
        assert [(Path(d.source).name, d.line) for d in docs] == [
            (f"data-{k:05d}-of-00002.arrow", row) for k in (0, 1) for row in range(1, half + 1)]


def test_a_folder_holding_a_datasets_folder_reads_it_as_one_entry(texts, tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    write_jsonl(root / "a.jsonl", texts[:3])
    write_arrow_dataset(root / "b", texts[3:9])
    write_parquet(root / "c.parquet", texts[9:12])
    assert [d.text for d in iter_documents([root])] == [t.strip() for t in texts[:12]]


def test_parquet_is_read_one_row_group_at_a_time(texts, tmp_path):
    """Arrow's memory pool holds a few row groups while a Parquet file is read, not the file:
    80 row groups of the addresses (28 MB), and the pool's peak stays under an eighth of the
    text (3.6 MB). Measured here: 1.8 MB (2.5 MB with ARROW_DEFAULT_MEMORY_POOL=system);
    with `ParquetFile.iter_batches`, whose pool grew with the file, 32 MB."""
    from electra.data.formats import read_parquet

    rows = texts * 80
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": rows}), path, row_group_size=len(texts))
    text_bytes = sum(len(t.encode()) for t in rows)
    before = pa.total_allocated_bytes()  # what other tests' Arrow objects still hold
    peak = count = 0
    for count, text in read_parquet(path, "text"):  # noqa: B007 - the last row's number
        peak = max(peak, pa.total_allocated_bytes() - before)
        assert text == rows[count - 1]
    assert count == len(rows)
    assert peak < text_bytes / 8, (peak, before, text_bytes)


@pytest.fixture(scope="module")
def prepared(texts, vocab_dir, tmp_path_factory):
    """Each format prepared with the same vocabulary and settings."""
    root = tmp_path_factory.mktemp("formats")
    sources = {"jsonl": write_jsonl(root / "c.jsonl", texts)}
    for fmt, write in FORMATS.items():
        folder = root / fmt.replace(" ", "_")
        folder.mkdir()
        sources[fmt] = write(folder, texts)
    return {fmt: prepare_corpus([src], vocab_dir, 64, root / f"data-{fmt.replace(' ', '_')}",
                                heldout_fraction=0.1, show_progress=False)["splits"]
            for fmt, src in sources.items()}, root


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_format_prepares_the_same_shards(fmt, prepared):
    splits, _ = prepared
    for split in ("train", "heldout"):
        ours = [s["sha256"] for s in splits[fmt][split]["shards"]]
        assert ours == [s["sha256"] for s in splits["jsonl"][split]["shards"]]
    assert splits[fmt]["train"]["num_examples"] > 100


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_pretraining_on_each_format_runs_and_resumes(fmt, prepared, tmp_path):
    _, root = prepared
    data = root / f"data-{fmt.replace(' ', '_')}"
    cfg = PretrainConfig.from_preset("tiny")
    merge(cfg, {"model": {"hidden_size": 32, "embedding_size": 32, "intermediate_size": 64,
                          "num_hidden_layers": 2, "max_position_embeddings": 64},
                "train": {"steps": 2, "batch_size": 4, "log_every": 1, "save_every": 2}})
    pretrain(cfg, data, tmp_path / "run", device="cpu", show_progress=False)
    cfg.train.steps = 4
    summary = pretrain(cfg, data, tmp_path / "run", device="cpu", show_progress=False,
                       resume=True)
    assert summary["steps"] == 4
    steps = [json.loads(line)["step"] for line in
             (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps[-1] == 4 and 3 in steps


def _refused(corpus: Path, vocab_dir: Path, out: Path, match: str, **kwargs) -> str:
    with pytest.raises(ElectraError, match=match) as err:
        prepare_corpus([corpus], vocab_dir, 64, out, show_progress=False, **kwargs)
    assert not out.exists()
    message = str(err.value)
    assert "\n" not in message
    return message


def test_parquet_without_the_text_column(texts, vocab_dir, tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"body": texts[:3]}), path)
    message = _refused(path, vocab_dir, tmp_path / "out", "no column 'text'")
    assert str(path) in message and "body" in message and "--text-field" in message
    assert len(list(iter_documents([path], text_field="body"))) == 3


def test_parquet_with_a_value_that_is_not_a_string(texts, vocab_dir, tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": texts[:6] + [None] + texts[6:8]}), path, row_group_size=4)
    _refused(path, vocab_dir, tmp_path / "out", f"{path}: row 7: 'text' is null")
    numbers = tmp_path / "n.parquet"
    pq.write_table(pa.table({"text": [1, 2]}), numbers)
    _refused(numbers, vocab_dir, tmp_path / "out", f"{numbers}: row 1: 'text' is int")


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_a_damaged_zstd_file(damage, texts, vocab_dir, tmp_path):
    path = write_zstd(tmp_path / "c.jsonl.zst", texts, frames=1)
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[:len(data) // 2])
        match = "truncated zstd frame"
    else:
        path.write_bytes(data[:40] + b"\xff" * 64 + data[104:])
        match = "corrupt zstd data"
    message = _refused(path, vocab_dir, tmp_path / "out", match)
    assert message.startswith(f"{path}:")


def test_an_arrow_folder_that_is_not_a_datasets_folder(texts, vocab_dir, tmp_path):
    folder = write_arrow_dataset(tmp_path / "saved", texts[:4])
    (folder / "state.json").unlink()
    _refused(folder, vocab_dir, tmp_path / "out", "not a folder written by `datasets`")
    splits = tmp_path / "dict"  # a DatasetDict: one folder per split; which to read is a choice
    write_arrow_dataset(splits / "train", texts[:4])
    write_arrow_dataset(splits / "test", texts[4:6])
    (splits / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}))
    _refused(splits, vocab_dir, tmp_path / "out2", "DatasetDict; give one split's folder")


def test_a_missing_extra_is_one_line(monkeypatch, texts, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    path = write_parquet(tmp_path / "c.parquet", texts[:2])
    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    hint = r"needs pyarrow: pip install -e '\.\[corpora\]' in the electra checkout"
    with pytest.raises(ElectraError, match=hint):
        list(iter_documents([path]))


@pytest.mark.slow  # ~10 s: two tiny corpora, each prepared from two formats in subprocesses
def test_the_formats_benchmark_runs_and_finds_the_same_shards(tmp_path):
    from benchmarks import corpus_formats

    report = corpus_formats.main(["--quick", "--work", str(tmp_path), "--formats",
                                  "jsonl,parquet", "--workers", "1"])
    assert set(report["runs"]) == {"1mb/jsonl", "1mb/parquet", "2mb/jsonl", "2mb/parquet"}
    assert report["same_shards_in_every_format"] == {1: True, 2: True}
    assert all(r["tokens_per_s"] > 0 and r["peak_rss_mb"] > 0 for r in report["runs"].values())


@pytest.mark.slow  # ~45 s: two tiny corpora prepared, then two torchrun runs of 4 steps
def test_the_ddp_memory_benchmark_reads_every_rank(tmp_path):
    """Two CPU ranks under torchrun, each rank's peak memory read from /proc, at two corpus
    sizes."""
    from benchmarks import ddp_memory

    report = ddp_memory.main(["--quick", "--work", str(tmp_path)])
    assert list(report["runs"]) == ["1mb", "2mb"]
    small, large = report["runs"]["1mb"], report["runs"]["2mb"]
    assert large["tokens"] > small["tokens"] > 0
    for run in (small, large):
        assert list(run["ranks"]) == ["0", "1"]
        for peaks in run["ranks"].values():
            assert 0 < peaks["peak_RssAnon_mb"] < peaks["peak_VmRSS_mb"]


@pytest.mark.slow  # ~30 s: two tiny corpora prepared, then run through `datasets`' map
def test_the_formats_benchmark_times_the_datasets_pipeline_on_the_same_file(tmp_path):
    pytest.importorskip("datasets", reason="the baseline needs `pip install datasets`")
    from benchmarks import corpus_formats

    report = corpus_formats.main(["--quick", "--work", str(tmp_path),
                                  "--formats", "jsonl", "--workers", "1", "--baseline"])
    baseline, electra = report["runs"]["1mb/datasets-pipeline"], report["runs"]["1mb/jsonl"]
    assert baseline["input_bytes"] == electra["input_bytes"]
    assert baseline["examples"] > 0 and baseline["tokens"] == baseline["examples"] * 128
    assert baseline["bytes_written"] > 0 and baseline["peak_rss_mb"] > 0
    assert report["baseline_seconds_over_electra_jsonl"][1] > 0
    assert not (tmp_path / "quick" / "hf-cache").exists()
