import jsonpatch

from admit.patch import escape, pointer, set_keys_ops, set_op


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
