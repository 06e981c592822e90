import jsonpatch

from admit.gang.patch import escape, pointer, set_keys_ops, set_op
from tests.helpers import example

LABEL = "scheduling.x-k8s.io/pod-group"


def test_json_pointer_segments_escape_tilde_before_slash():
    assert escape("scheduling.x-k8s.io/pod-group") == "scheduling.x-k8s.io~1pod-group"
    assert escape("a~b/c") == "a~0b~1c"
    assert pointer(("metadata", "labels", "a/b")) == "/metadata/labels/a~1b"


def test_adding_a_label_to_a_missing_labels_map_adds_the_map():
    obj = {"metadata": {"name": "x"}}
    ops = set_keys_ops(obj, ("metadata", "labels"), {"a/b": "1", "c": "2"})
    assert ops == [{"op": "add", "path": "/metadata/labels", "value": {"a/b": "1", "c": "2"}}]
    assert jsonpatch.apply_patch(obj, ops)["metadata"]["labels"] == {"a/b": "1", "c": "2"}


def test_adding_to_a_missing_metadata_adds_the_nested_maps():
    obj = {"spec": {"template": {"spec": {}}}}
    ops = set_keys_ops(obj, ("spec", "template", "metadata", "labels"), {"k": "v"})
    assert ops == [{"op": "add", "path": "/spec/template/metadata", "value": {"labels": {"k": "v"}}}]


def test_a_null_labels_map_is_replaced_not_added_into():
    obj = {"metadata": {"labels": None}}
    ops = set_keys_ops(obj, ("metadata", "labels"), {"k": "v"})
    assert jsonpatch.apply_patch(obj, ops) == {"metadata": {"labels": {"k": "v"}}}


def test_an_equal_value_gives_no_operation_and_a_different_one_a_replace():
    obj = {"spec": {"schedulerName": "x"}}
    assert set_op(obj, ("spec", "schedulerName"), "x") is None
    assert set_op(obj, ("spec", "schedulerName"), "y") == {"op": "replace", "path": "/spec/schedulerName", "value": "y"}


def test_existing_labels_get_one_add_per_missing_key():
    obj = {"metadata": {"labels": {"app": "web", "k": "v"}}}
    ops = set_keys_ops(obj, ("metadata", "labels"), {"k": "v", "scheduling.x-k8s.io/pod-group": "web"})
    assert ops == [{"op": "add", "path": "/metadata/labels/scheduling.x-k8s.io~1pod-group", "value": "web"}]


def test_a_path_through_a_list_index_patches_that_item_of_a_jobset_or_ray_cluster():
    obj = {"spec": {"replicatedJobs": [{"name": "a", "template": {"spec": {"template": {"spec": {}}}}},
                                       {"name": "b", "template": {"spec": {"template": {"metadata": {}}}}}]}}
    ops = set_keys_ops(obj, ("spec", "replicatedJobs", "1", "template", "spec", "template", "metadata", "labels"),
                       {"k": "v"})
    assert ops == [{"op": "add", "path": "/spec/replicatedJobs/1/template/spec/template/metadata/labels",
                    "value": {"k": "v"}}]
    op = set_op(obj, ("spec", "replicatedJobs", "0", "template", "spec", "template", "spec", "schedulerName"), "s")
    assert op == {"op": "add", "path": "/spec/replicatedJobs/0/template/spec/template/spec/schedulerName",
                  "value": "s"}
    patched = jsonpatch.apply_patch(obj, ops + [op])
    assert patched["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["metadata"]["labels"] == {"k": "v"}
    assert set_op(patched, ("spec", "replicatedJobs", "0", "template", "spec", "template", "spec", "schedulerName"),
                  "s") is None


def test_a_list_index_past_the_end_or_not_a_number_gives_no_operation():
    obj = {"spec": {"workerGroupSpecs": [{"template": {}}]}}
    assert set_op(obj, ("spec", "workerGroupSpecs", "3", "template", "x"), 1) is None
    assert set_op(obj, ("spec", "workerGroupSpecs", "first", "template"), 1) is None


# --- the builder never rewrites what it found (lists included) -------------------------------------------------


def _labelled_jobset() -> dict:
    """The JobSet example as a user writes it, with its own labels on the workers' pod template (Istio, a team)."""
    js = example("jobset-pytorch.yaml")
    js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["metadata"] = {
        "labels": {"team": "vision", "sidecar.istio.io/inject": "false",
                   "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"},
        "annotations": {"prometheus.io/scrape": "true"}}
    return js


def test_a_jobset_template_inside_the_replicated_jobs_list_keeps_its_labels_and_gets_only_the_group_label():
    js = _labelled_jobset()
    path = ("spec", "replicatedJobs", "1", "template", "spec", "template", "metadata", "labels")
    ops = set_keys_ops(js, path, {LABEL: "pytorch"})
    assert ops == [{"op": "add", "path": "/spec/replicatedJobs/1/template/spec/template/metadata/labels/"
                                          "scheduling.x-k8s.io~1pod-group", "value": "pytorch"}]
    labels = jsonpatch.apply_patch(js, ops)["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["metadata"][
        "labels"]
    assert labels == {"team": "vision", "sidecar.istio.io/inject": "false",
                      "trainer.kubeflow.org/trainjob-ancestor-step": "trainer", LABEL: "pytorch"}


def test_a_ray_worker_group_template_keeps_its_labels_and_a_template_without_metadata_gets_only_admits_keys():
    svc = example("rayservice-sample.yaml")
    workers = svc["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    workers[0]["template"]["metadata"] = {"labels": {"team": "serving", "cost-center": "cc-4711"}}
    worker_path = ("spec", "rayClusterConfig", "workerGroupSpecs", "0", "template", "metadata", "labels")
    head_path = ("spec", "rayClusterConfig", "headGroupSpec", "template", "metadata", "labels")
    ops = set_keys_ops(svc, worker_path, {LABEL: "rayservice-sample"}) + \
        set_keys_ops(svc, head_path, {LABEL: "rayservice-sample"})
    assert ops[1] == {"op": "add", "path": "/spec/rayClusterConfig/headGroupSpec/template/metadata",
                      "value": {"labels": {LABEL: "rayservice-sample"}}}
    patched = jsonpatch.apply_patch(svc, ops)
    assert patched["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["metadata"]["labels"] == {
        "team": "serving", "cost-center": "cc-4711", LABEL: "rayservice-sample"}
    assert set_keys_ops(patched, worker_path, {LABEL: "rayservice-sample"}) == []


def test_a_key_with_another_value_is_replaced_alone():
    obj = {"spec": {"workerGroupSpecs": [{"template": {"metadata": {"labels": {"app": "ray", LABEL: "old"}}}}]}}
    ops = set_keys_ops(obj, ("spec", "workerGroupSpecs", "0", "template", "metadata", "labels"), {LABEL: "new"})
    assert ops == [{"op": "replace", "path": "/spec/workerGroupSpecs/0/template/metadata/labels/"
                                             "scheduling.x-k8s.io~1pod-group", "value": "new"}]


def test_keys_and_path_segments_with_tilde_and_slash_are_escaped_tilde_first_and_apply_with_jsonpatch():
    obj = {"spec": {"a/b~c": [{"metadata": {"labels": {"x~1y": "user"}}}]}}
    ops = set_keys_ops(obj, ("spec", "a/b~c", "0", "metadata", "labels"), {"k~/1": "v", "x/y": "w"})
    assert [op["path"] for op in ops] == ["/spec/a~1b~0c/0/metadata/labels/k~0~11",
                                          "/spec/a~1b~0c/0/metadata/labels/x~1y"]
    patched = jsonpatch.apply_patch(obj, ops)
    assert patched["spec"]["a/b~c"][0]["metadata"]["labels"] == {"x~1y": "user", "k~/1": "v", "x/y": "w"}


def test_a_scalar_or_list_where_a_map_belongs_is_left_as_it_is():
    assert set_keys_ops({"metadata": {"labels": ["a", "b"]}}, ("metadata", "labels"), {"k": "v"}) == []
    assert set_keys_ops({"metadata": "x"}, ("metadata", "labels"), {"k": "v"}) == []
    assert set_keys_ops({"spec": {"groups": [None]}}, ("spec", "groups", "0", "labels"), {"k": "v"}) == []
    assert set_op({"spec": {"template": 7}}, ("spec", "template", "spec", "schedulerName"), "s") is None


def test_a_value_of_another_json_type_is_replaced_even_when_python_calls_it_equal():
    assert set_op({"spec": {"x": 1}}, ("spec", "x"), True) == {"op": "replace", "path": "/spec/x", "value": True}
    assert set_op({"spec": {"x": True}}, ("spec", "x"), True) is None
