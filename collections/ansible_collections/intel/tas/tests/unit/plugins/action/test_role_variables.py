"""intel.tas.role_variables: which variables it leaves to other installed roles."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.intel.tas.plugins.action.role_variables import other_roles_declaring, unknown_variables


def _role(base, parts, spec=None, defaults=None):
    role = base.joinpath(*parts)
    if spec is not None:
        (role / "meta").mkdir(parents=True)
        (role / "meta" / "argument_specs.yml").write_text(
            "argument_specs:\n  main:\n    options:\n" + "".join("      %s: {}\n" % name for name in spec))
    if defaults is not None:
        (role / "defaults").mkdir(parents=True)
        (role / "defaults" / "main.yml").write_text("".join("%s: 1\n" % name for name in defaults))
    return role


def test_a_variable_another_installed_role_declares_is_that_roles(tmp_path):
    collections, roles = tmp_path / "collections", tmp_path / "roles"
    ours = _role(collections, ["ansible_collections", "intel", "tas", "roles", "node_exporter"], spec=["node_exporter_port"])
    _role(collections, ["ansible_collections", "prometheus", "prometheus", "roles", "node_exporter"],
          spec=["node_exporter_version"], defaults=["node_exporter_textfile_dir"])
    # another copy of this collection is not another role
    _role(tmp_path / "elsewhere", ["ansible_collections", "intel", "tas", "roles", "node_exporter"],
          spec=["node_exporter_old_name"])
    _role(roles, ["someone.node_exporter"], defaults=["node_exporter_user"])
    paths = [str(collections), str(tmp_path / "elsewhere")]

    def theirs(name):
        return other_roles_declaring(name, str(ours), paths, [str(roles)])

    assert theirs("node_exporter_version") == ["prometheus.prometheus.node_exporter"]
    assert theirs("node_exporter_textfile_dir") == ["prometheus.prometheus.node_exporter"]
    assert theirs("node_exporter_user") == ["someone.node_exporter"]
    assert theirs("node_exporter_old_name") == []
    assert theirs("node_exporter_colectors") == []


def test_only_unknown_names_of_the_role_are_refused_and_another_roles_are_left_to_it():
    assert unknown_variables(["prometheus_adapter_x", "prometheus_x", "prometheus_port"], "prometheus_",
                             {"prometheus_port"}, ["prometheus_adapter_"]) == ["prometheus_x"]
