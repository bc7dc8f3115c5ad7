"""Cell tags → layout: roles, aliases, continuation, step options, and every bad-tag error."""

from __future__ import annotations

import pytest
from nbformat import NotebookNode

from cube_jupyter.pipelines.model import PipelineError, StepOptions
from cube_jupyter.pipelines.tags import Layout, parse_cell_tags, parse_duration, split_cells
from tests.pipelines.notebooks import code, markdown, notebook


def layout_of(*cells: NotebookNode) -> Layout:
    return split_cells(notebook(*cells).cells)


def test_untagged_cells_continue_the_step_above_and_markdown_is_ignored() -> None:
    layout = layout_of(
        code("import os", "imports"),
        code("import sys"),
        markdown("# notes"),
        code("a = 1", "step:first"),
        code("b = a"),
        markdown("more notes"),
        code("c = b"),
        code("d = 1", "step:second"),
    )
    assert [(s.name, s.cells) for s in layout.steps] == [("first", [3, 4, 6]), ("second", [7])]
    assert layout.steps[0].source == ["a = 1", "b = a", "c = b"]
    assert layout.imports == [(0, "import os"), (1, "import sys")]


def test_kale_aliases_are_read_as_the_native_tags() -> None:
    layout = layout_of(
        code("x = 1", "pipeline-parameters"),
        code("y = x", "block:load_data"),
        code("z = y", "block:train", "prev:load_data"),
        code("z", "pipeline-metrics"),
    )
    assert [s.name for s in layout.steps] == ["load-data", "train"]
    assert layout.steps[1].after == ["load-data"]
    assert layout.parameters == [(0, "x = 1")]
    assert layout.metrics == [(3, "z")]


def test_tagging_the_current_step_again_continues_it_even_across_shared_cells() -> None:
    layout = layout_of(
        code("a = 1", "block:load"),
        code("b = 2", "block:load"),
        code("def f(): pass", "functions"),
        code("c = 3", "step:load"),
    )
    assert [(s.name, s.cells) for s in layout.steps] == [("load", [0, 1, 3])]
    assert layout.functions == [(2, "def f(): pass")]


def test_skip_drops_its_own_cell_and_the_untagged_cells_after_it_continue_the_step_before() -> None:
    """Kale's rule: a skip cell is transparent; Titanic's NaN-filling cells after a skipped plot stay
    in their step."""
    layout = layout_of(
        code("a = 1", "step:one"),
        code("plot(a)", "skip"),
        code("a = a * 2"),
        code("b = a", "step:two"),
        code("plot(b)", "skip", "prev:one"),
    )
    assert [(s.name, s.cells) for s in layout.steps] == [("one", [0, 2]), ("two", [3])]
    assert layout.steps[1].after == []  # prev: on a skip cell is ignored, as in Kale
    assert [(w.cell, w.message) for w in layout.warnings] == [
        (4, "cell 4 is a skip cell, so its tags 'prev:one' are ignored")
    ]


def test_code_before_the_first_tag_runs_in_no_step_and_says_so() -> None:
    layout = layout_of(code("   \n"), code("# notes only\n\n"), code("x = 1"), code("a = 1", "step:one"))
    assert layout.steps[0].cells == [3]
    assert [w.cell for w in layout.warnings] == [2]
    assert "before the first tagged cell" in layout.warnings[0].message
    assert "step:NAME" in layout.warnings[0].message


def test_an_empty_block_or_step_tag_continues_the_step_above() -> None:
    """What Kale's editor writes on the cells after a step's first."""
    layout = layout_of(
        code("a = 1", "block:load_data"),
        code("b = 2", "block:"),
        code("c = 3", "step:", "gpu:1"),
        code("d = 4", "block:train", "prev:load_data"),
    )
    assert [(s.name, s.cells) for s in layout.steps] == [("load-data", [0, 1, 2]), ("train", [3])]
    assert layout.steps[0].options == {"gpu": 1}
    assert layout.warnings == []


def test_a_notebook_without_steps_is_an_error() -> None:
    with pytest.raises(PipelineError, match="no steps") as err:
        layout_of(code("import os", "imports"), markdown("text"))
    assert err.value.field == "cells"


def test_naming_an_earlier_step_again_adds_the_cell_to_it_as_kale_does_and_says_so() -> None:
    """Kale's own tag-parsing notebook tags two cells `block:imports`, with a step between them."""
    layout = layout_of(code("x = 1", "step:a"), code("y = 1", "step:b"), code("z = 1", "step:a"))
    assert [(s.name, s.cells) for s in layout.steps] == [("a", [0, 2]), ("b", [1])]
    [warning] = layout.warnings
    assert warning.cell == 2 and "names step 'a' (opened at cell 0) again" in warning.message


def test_kale_underscore_names_are_their_dashed_spelling() -> None:
    layout = layout_of(
        code("x = 1", "block:load_data"), code("y = 1", "step:b"), code("z = 1", "step:load-data")
    )
    assert [(s.name, s.cells) for s in layout.steps] == [("load-data", [0, 2]), ("b", [1])]


def test_a_prev_tag_may_name_several_steps_as_early_kale_read_it() -> None:
    assert parse_cell_tags(["step:c", "prev:sum:cumsum", "prev:a"], 0).after == ("sum", "cumsum", "a")


@pytest.mark.parametrize("name", ["Train", "train!", "-train", "a" * 64, "tr ain"])
def test_invalid_step_names_are_rejected_naming_the_cell(name: str) -> None:
    with pytest.raises(PipelineError, match=r"DNS-1123|characters long|not a valid") as err:
        layout_of(code("x = 1", f"step:{name}"))
    assert err.value.field == "cells[0].tags"


def test_step_options_from_tags_on_any_cell_of_the_step() -> None:
    layout = layout_of(
        code("x = 1", "step:train", "image:registry.example.com/ml/torch:2.3", "cpu:2", "memory:4Gi"),
        code("y = x", "gpu:1", "retries:3", "timeout:10m"),
    )
    assert layout.steps[0].step_options() == StepOptions(
        image="registry.example.com/ml/torch:2.3", cpu="2", memory="4Gi", gpu=1, retries=3, timeout=600.0
    )


def test_kale_limit_tags_set_gpu_cpu_and_memory_and_unknown_limits_warn() -> None:
    layout = layout_of(
        code(
            "x = 1",
            "block:train",
            "limit:nvidia.com/gpu:2",
            "limit:memory:1Gi",
            "limit:cpu:500m",
            "limit:ephemeral-storage:1Gi",
            "annotation:team:ml",
        )
    )
    options = layout.steps[0].step_options()
    assert (options.gpu, options.memory, options.cpu) == (2, "1Gi", "500m")
    assert options.annotations == {"team": "ml"}
    assert [(w.cell, w.message) for w in layout.warnings] == [
        (0, "cell 0: tag 'limit:ephemeral-storage:1Gi' is ignored (only GPU, cpu and memory limits are read)")
    ]


@pytest.mark.parametrize(
    "tag, message",
    [
        ("gpu:x", "whole number"),
        ("gpu:-1", "whole number"),
        ("retries:two", "whole number"),
        ("retries:1000", "up to 100"),
        ("timeout:0", "positive duration"),
        ("timeout:soon", "positive duration"),
        ("timeout:-5", "positive duration"),
        ("cpu:lots", "Kubernetes quantity"),
        ("cpu:0", "more than 0"),
        ("memory:4 GB", "Kubernetes quantity"),
        ("image:my image", "image reference"),
        ("image:$(rm -rf /)", "image reference"),
        ("after:", "empty value"),
        ("after", "needs a value"),
        ("cache:sometimes", "cache:enabled"),
        ("annotation:team", "needs a value"),
        ("label:team:not a label value", "label value"),
        ("label:bad key!:x", "label key"),
    ],
)
def test_bad_tag_values_name_the_cell(tag: str, message: str) -> None:
    with pytest.raises(PipelineError, match=message) as err:
        layout_of(code("a = 1", "step:one"), code("x = 1", "step:two", tag))
    assert err.value.field == "cells[1].tags"


def test_conflicting_options_in_one_step_are_an_error() -> None:
    with pytest.raises(PipelineError, match="sets gpu twice") as err:
        layout_of(code("x = 1", "step:train", "gpu:1"), code("y = 2", "gpu:2"))
    assert err.value.field == "cells[1].tags"
    assert "cells 0 and 1" in err.value.message
    # the same value twice is fine
    assert layout_of(code("x = 1", "step:t", "gpu:1"), code("y = 2", "gpu:1")).steps[0].options["gpu"] == 1


def test_a_cell_belongs_to_one_step() -> None:
    with pytest.raises(PipelineError, match="tagged a, b") as err:
        layout_of(code("a = 1", "step:a"), code("x = 1", "step:a", "step:b"))
    assert err.value.field == "cells[1].tags"


@pytest.mark.parametrize(
    "tags, role, ignored",
    [
        (["step:b", "imports"], "imports", "'step:b'"),
        (["parameters", "skip"], "parameters", "'skip'"),
        (["imports", "after:a"], "imports", "'after:a'"),
        (["gpu:1", "functions"], "functions", "'gpu:1'"),
    ],
)
def test_a_role_tag_decides_the_cell_and_its_other_tags_are_ignored_with_a_warning(
    tags: list[str], role: str, ignored: str
) -> None:
    """As in Kale, whose parser returns at the first role tag of a cell."""
    layout = layout_of(code("a = 1", "step:a"), code("x = 1", *tags))
    assert [s.name for s in layout.steps] == ["a"]
    assert getattr(layout, role) == [(1, "x = 1")]
    assert [(w.cell, w.message) for w in layout.warnings] == [
        (1, f"cell 1 is a {role} cell, so its tags {ignored} are ignored")
    ]


@pytest.mark.parametrize("tag", ["after:a", "gpu:1"])
def test_step_tags_on_a_cell_continuing_a_shared_cell_are_an_error(tag: str) -> None:
    with pytest.raises(PipelineError, match="belong on a step's cell") as err:
        layout_of(code("a = 1", "step:a"), code("import os", "imports"), code("x = 1", tag))
    assert err.value.field == "cells[2].tags"


def test_pod_labels_annotations_and_cache_tags_set_the_step_options() -> None:
    layout = layout_of(
        code("x = 1", "step:train", "label:team:ml", "annotation:example.com/owner:alice:smith"),
        code("y = 2", "cache:disabled", "label:tier:gold"),
    )
    options = layout.steps[0].step_options()
    assert options.labels == {"team": "ml", "tier": "gold"}
    assert options.annotations == {"example.com/owner": "alice:smith"}  # the rest of the tag, as Kale
    assert options.cache is False


def test_kales_unsupported_tags_warn_naming_the_cell() -> None:
    layout = layout_of(code("x = 1", "step:a", "secret:creds:token:TOKEN", "report:enabled"))
    assert [w.cell for w in layout.warnings] == [0, 0]
    assert "secret:creds:token:TOKEN" in layout.warnings[0].message
    assert "report:enabled" in layout.warnings[1].message


def test_kales_notebook_defaults_apply_to_steps_without_their_own() -> None:
    metadata = {
        "kubeflow_notebook": {
            "docker_image": "registry.example.com/ml/base:1",
            "steps_defaults": ["label:team:ml", "limit:memory:2Gi", "annotation:a:b"],
            "volumes": [{"name": "data", "mount_point": "/data"}],
            "experiment_name": "demo",
        }
    }
    cells = [code("x = 1", "step:one", "memory:8Gi", "label:team:vision"), code("y = x", "step:two")]
    layout = split_cells(notebook(*cells).cells, metadata)
    one, two = (s.step_options() for s in layout.steps)
    assert (one.memory, one.labels, one.image) == (
        "8Gi",
        {"team": "vision"},
        "registry.example.com/ml/base:1",
    )
    assert (two.memory, two.labels, two.annotations) == ("2Gi", {"team": "ml"}, {"a": "b"})
    assert [w.message for w in layout.warnings] == [
        "metadata.kubeflow_notebook.volumes is ignored: steps read and write the run's artifact store",
        "metadata.kubeflow_notebook.experiment_name is ignored: runs are kept in the notebook's run history",
    ]


def test_tags_must_be_a_list_of_strings() -> None:
    with pytest.raises(PipelineError, match="list of strings") as err:
        parse_cell_tags("step:a", 4)
    assert err.value.field == "cells[4].tags"
    with pytest.raises(PipelineError, match="list of strings"):
        parse_cell_tags(["step:a", 3], 0)


def test_unknown_tags_are_ignored_and_keys_are_case_insensitive() -> None:
    tags = parse_cell_tags(["hide-input", "injected-parameters", "STEP:train_a", " after:x "], 2)
    assert (tags.role, tags.step, tags.after) == ("step", "train-a", ("x",))
    assert parse_cell_tags(["PARAMETERS"], 0).role == "parameters"


def test_several_after_tags_are_kept_in_order_without_repeats() -> None:
    tags = parse_cell_tags(["step:c", "after:a", "prev:b", "after:a"], 0)
    assert tags.after == ("a", "b")


@pytest.mark.parametrize(
    "text, seconds", [("30", 30.0), ("1.5", 1.5), ("90s", 90.0), ("10m", 600.0), ("2h", 7200.0)]
)
def test_timeouts_accept_seconds_and_suffixes(text: str, seconds: float) -> None:
    assert parse_duration(text, "cells[0].tags") == seconds
