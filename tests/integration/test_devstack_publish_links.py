"""`metallo dev publish DIR` never follows a symbolic link out of DIR: links inside
stay links, a link leading out refuses the publication before anything is created
(metallo.devstack.gitrepo.publish against the real lab Git server over TLS)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess

import pytest

from metallo.devstack.gitrepo import PublishError, links_leaving, publish
from metallo.devstack.layout import Layout
from tests.integration.site_coordination_support import OPERATOR_TOKEN


@pytest.fixture
def layout(edge, tmp_path) -> Layout:
    root = tmp_path / "dev"
    (root / "certs").mkdir(parents=True)
    (root / "secrets").mkdir()
    shutil.copy(edge.ca_file, root / "certs" / "ca.pem")
    (root / "secrets" / "git-operator-token").write_text(OPERATOR_TOKEN + "\n")
    return Layout(root)


def _source(tmp_path, name: str = "src"):
    source = tmp_path / name
    (source / "sub").mkdir(parents=True)
    (source / "actions.yaml").write_text("version: 1\nactions: {}\n")
    (source / "sub" / "data.txt").write_text("inside\n")
    return source


async def test_links_out_of_the_directory_refuse_and_create_nothing(edge, layout, tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("do not publish\n")
    cases = {
        "absolute": lambda s: os.symlink("/etc", s / "etc"),
        "absolute-inside": lambda s: os.symlink(s / "sub" / "data.txt", s / "abs"),
        "relative-up": lambda s: os.symlink("../../secret.txt", s / "sub" / "up"),
        "through-a-link": lambda s: (os.symlink(".", s / "here"),
                                     os.symlink("here/..", s / "parent")),
        "dangling-out": lambda s: os.symlink("../../nowhere", s / "gone"),
    }
    for case, make in cases.items():
        source = _source(tmp_path, f"src-{case}")
        make(source)
        with pytest.raises(PublishError, match="symbolic links leading outside") as exc:
            await asyncio.to_thread(publish, source, f"links-{case}", edge_url=edge.url,
                                    layout=layout)
        assert "Nothing was created" in str(exc.value), case
        assert not (edge.git_root / f"links-{case}.git").exists(), case


async def test_links_inside_the_directory_are_published_as_links(edge, layout, tmp_path):
    source = _source(tmp_path)
    os.symlink("sub/data.txt", source / "data-link")
    os.symlink("sub", source / "sub-link")
    os.symlink("../actions.yaml", source / "sub" / "back")
    url, commit = await asyncio.to_thread(publish, source, "links-inside", edge_url=edge.url,
                                          layout=layout)
    assert url == f"{edge.url}/git/links-inside.git" and len(commit) == 40
    bare = edge.git_root / "links-inside.git"
    tree = (await asyncio.to_thread(
        subprocess.run, ["git", "-C", str(bare), "ls-tree", "-r", commit], check=True,
        capture_output=True, text=True)).stdout
    modes = {line.split("\t")[1]: line.split()[0] for line in tree.splitlines()}
    assert modes == {"actions.yaml": "100644", "data-link": "120000", "sub-link": "120000",
                     "sub/back": "120000", "sub/data.txt": "100644"}
    target = (await asyncio.to_thread(
        subprocess.run, ["git", "-C", str(bare), "cat-file", "-p", f"{commit}:data-link"],
        check=True, capture_output=True, text=True)).stdout
    assert target == "sub/data.txt"


def test_links_leaving_reports_each_link(tmp_path):
    source = _source(tmp_path)
    os.symlink("/etc/passwd", source / "passwd")
    os.symlink("sub", source / "fine")
    os.symlink("../../x", source / "sub" / "out")
    assert links_leaving(source) == ["passwd -> /etc/passwd", "sub/out -> ../../x"]
