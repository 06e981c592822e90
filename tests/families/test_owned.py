"""admit.owned: the one list of the fields admit writes, and how a key path is matched against it."""

from admit.config import LEGACY_POD_GROUP_API_GROUP, LEGACY_POD_GROUP_LABEL, Config
from admit.families.owned import owner_of, resolved
from tests.backends import volcano
from tests.helpers import example

CONFIG = Config()


def test_the_pod_group_label_is_admits_on_any_pod_template_and_a_users_label_beside_it_is_not():
    js = example("jobset-pytorch.yaml")
    template = ("spec", "replicatedJobs", 1, "template", "spec", "template")
    assert owner_of(template + ("metadata", "labels", "scheduling.x-k8s.io/pod-group"), js, CONFIG) is not None
    assert owner_of(template + ("spec", "schedulerName"), js, CONFIG) is not None
    assert owner_of(template + ("metadata", "labels", "team"), js, CONFIG) is None
    assert owner_of(template + ("spec", "containers", 0, "image"), js, CONFIG) is None
    assert owner_of(("metadata", "labels", "gang.admit.dev/managed"), js, CONFIG) is not None
    # the managed label is the workload's own: the same key on a pod template is the user's
    assert owner_of(template + ("metadata", "labels", "gang.admit.dev/managed"), js, CONFIG) is None


def test_only_admits_own_runtime_patches_entry_is_admits():
    tj = example("trainjob-torch.yaml")
    tj["spec"]["runtimePatches"] = [
        {"manager": "platform.example.com/defaults", "trainingRuntimeSpec": {"template": {"metadata": {}}}},
        {"manager": "gang.admit.dev/admit", "trainingRuntimeSpec": {"template": {"metadata": {"annotations": {}}}}},
    ]
    assert owner_of(("spec", "runtimePatches", 0, "manager"), tj, CONFIG) is None
    assert owner_of(("spec", "runtimePatches", "1", "trainingRuntimeSpec", "template"), tj, CONFIG) is not None


def test_the_owned_keys_follow_the_configured_label_and_annotation_prefix():
    legacy = Config(pod_group_label=LEGACY_POD_GROUP_LABEL, pod_group_group=LEGACY_POD_GROUP_API_GROUP,
                    annotation_prefix="gang.example.com")
    path = ("spec", "template", "metadata", "labels")
    assert owner_of(path + (LEGACY_POD_GROUP_LABEL,), {}, legacy) is not None
    assert owner_of(path + ("scheduling.x-k8s.io/pod-group",), {}, legacy) is None
    assert owner_of(("metadata", "labels", "gang.example.com/managed"), {}, legacy) is not None
    assert owner_of(path[:-1] + ("annotations", "gang.example.com/group-spec"), {}, legacy) is not None


def test_every_owned_field_says_why_it_is_admits():
    assert all(len(f.why) > 40 for f in resolved(CONFIG))


def test_the_pod_fields_a_backend_writes_are_admits_while_that_backend_is_registered():
    # each backend lists its own pod fields (its owned_fields hook): the Volcano test backend's group annotation is
    # admit's only while it is registered, as an installed backend's would be
    annotation = ("spec", "template", "metadata", "annotations", volcano.GROUP_NAME_ANNOTATION)
    assert owner_of(annotation, {}, CONFIG) is None
    volcano.install()
    try:
        assert owner_of(annotation, {}, CONFIG) is not None
        assert owner_of(("spec", "template", "spec", "schedulerName"), {}, CONFIG) is not None
    finally:
        volcano.uninstall()
    assert owner_of(annotation, {}, CONFIG) is None
