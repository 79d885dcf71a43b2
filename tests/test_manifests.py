"""queueing.manifests: files, directories, multi-document YAML/JSON and Lists, with clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from queueing.manifests import ManifestError, read_documents


def test_files_directories_lists_and_json(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        "kind: Node\nmetadata: {name: n1}\n---\n---\nkind: Node\nmetadata: {name: n2}\n"
    )
    (tmp_path / "b.json").write_text('{"kind": "List", "items": [{"kind": "Pod"}, {"kind": "Job"}]}')
    (tmp_path / "notes.txt").write_text("not a manifest")
    docs = read_documents([str(tmp_path)])
    assert [(d["kind"], w.split("/")[-1]) for d, w in docs] == [
        ("Node", "a.yaml document 1"),
        ("Node", "a.yaml document 3"),
        ("Pod", "b.json document 1 items[0]"),
        ("Job", "b.json document 1 items[1]"),
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("kind: [unclosed\n", "line 2: not valid YAML/JSON: did not find expected ',' or ']'"),
        ("- just\n- a list\n", "document 1: expected an object, got list"),
        ("kind: List\nitems: [3]\n", "document 1 items[0]: expected an object, got int"),
    ],
)
def test_bad_documents_name_file_and_place(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "x.yaml"
    f.write_text(content)
    with pytest.raises(ManifestError, match=r"x\.yaml") as e:
        read_documents([str(f)])
    assert message in str(e.value)


def test_missing_path_and_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"nope\.yaml: no such file or directory"):
        read_documents([str(tmp_path / "nope.yaml")])
    with pytest.raises(ManifestError, match=r"directory has no \.yaml"):
        read_documents([str(tmp_path)])
