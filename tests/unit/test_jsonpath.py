"""gpuctl.cli.jsonpath against client-go's own test table (k8s.io/client-go/util/jsonpath/jsonpath_test.go,
v0.36.3), case by case, with the test's name.

Where client-go feeds Go structs, the input here is the same data as JSON (what gpuctl's printers are
given); Go prints a struct's fields in declaration order but a map's keys sorted, and every object
kubectl prints is a map, so those few expectations list the keys sorted (marked `sorted keys`).
The golden comparison with the kubectl binary itself is tests/integration/test_cli_kubectl.py.
"""

from __future__ import annotations

import json

import pytest

from gpuctl.cli.jsonpath import JSONPath, JSONPathError, go_sprint, relaxed

TYPES = {
    "bools": [True, False, True, False],
    "integers": [1, 2, 3, 4],
    "floats": [1.0, 2.2, 3.3, 4.0],
    "strings": ["one", "two", "three", "four"],
    "interfaces": [True, "one", 1, 1.1],
    "maps": [
        {"name": "one", "value": 1},
        {"name": "two", "value": 2.02},
        {"name": "three", "value": 3.03},
        {"name": "four", "value": 4.04},
    ],
    "structs": [
        {"name": "one", "value": 1, "type": "integer"},
        {"name": "two", "value": 2.002, "type": "float"},
        {"name": "three", "value": 3, "type": "integer"},
        {"name": "four", "value": 4.004, "type": "float"},
    ],
}

STORE = {
    "Name": "jsonpath",
    "Book": [
        {"Category": "reference", "Author": "Nigel Rees", "Title": "Sayings of the Centurey", "Price": 8.95},
        {"Category": "fiction", "Author": "Evelyn Waugh", "Title": "Sword of Honour", "Price": 12.99},
        {"Category": "fiction", "Author": "Herman Melville", "Title": "Moby Dick", "Price": 8.99},
    ],
    "Bicycle": [
        {"Color": "red", "Price": 19.95, "IsNew": True},
        {"Color": "green", "Price": 20.01, "IsNew": False},
    ],
    "Labels": {"engieer": 10, "web/html": 15, "k8s-app": 20},
    "Employees": {"jason": "manager", "dan": "clerk"},
}

POINTS = json.loads(
    """[{"id": "i1", "x":4, "y":-5}, {"id": "i2", "x":-2, "y":-5, "z":1}, {"id": "i3", "x":  8, "y":  3 },
    {"id": "i4", "x": -6, "y": -1 }, {"id": "i5", "x":  0, "y":  2, "z": 1 }, {"id": "i6", "x":  1, "y":  4 },
    {"id": "i7", "x":  null, "y":  4 }]"""
)

NODES = {
    "kind": "List",
    "items": [
        {
            "kind": "None",
            "metadata": {"name": "127.0.0.1", "labels": {"kubernetes.io/hostname": "127.0.0.1"}},
            "status": {
                "capacity": {"cpu": "4"},
                "ready": True,
                "addresses": [{"type": "LegacyHostIP", "address": "127.0.0.1"}],
            },
        },
        {
            "kind": "None",
            "metadata": {"name": "127.0.0.2", "labels": {"kubernetes.io/hostname": "127.0.0.2"}},
            "status": {
                "capacity": {"cpu": "8"},
                "ready": False,
                "addresses": [
                    {"type": "LegacyHostIP", "address": "127.0.0.2"},
                    {"type": "another", "address": "127.0.0.3"},
                ],
            },
        },
    ],
    "users": [
        {"name": "myself", "user": {}},
        {"name": "e2e", "user": {"username": "admin", "password": "secret"}},
    ],
}

PODS = {
    "items": [
        {
            "metadata": {"name": "pod1"},
            "spec": {
                "containers": [
                    {"name": "foo", "another": [{"name": "value1"}, {"name": "value2"}]},
                    {"name": "bar", "another": [{"name": "value1"}, {"name": "value2"}]},
                ]
            },
        },
        {
            "metadata": {"name": "pod2"},
            "spec": {"containers": [{"name": "baz", "another": [{"name": "value1"}, {"name": "value2"}]}]},
        },
    ]
}

ANNOTATED = {
    "kind": "List",
    "items": [
        {"kind": "Pod", "metadata": {"name": "pod1", "annotations": {"color": "blue"}}},
        {"kind": "Pod", "metadata": {"name": "pod2"}},
        {"kind": "Pod", "metadata": {"name": "pod3", "annotations": {"color": "green"}}},
        {"kind": "Pod", "metadata": {"name": "pod4", "annotations": {"color": "blue"}}},
    ],
}


def containers(n: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "spec": {"containers": [{"image": "radial/busyboxplus:curl", "name": f"fake{i}"} for i in range(n)]},
    }


RUNNING = {
    "kind": "List",
    "items": [
        *(
            {"kind": "Pod", "metadata": {"name": f"pod{i}"}, "status": {"phase": "Running"}}
            for i in (1, 2, 3)
        ),
        {"resourceVersion": ""},
    ],
}

ERR = object()  # the case expects an error (parse or execute)

# (name, template, input, expected, allow missing keys)
CASES = [
    # TestTypesInput
    ("boolSlice", "{ .bools }", TYPES, "[true,false,true,false]", False),
    ("boolSliceIndex", "{ .bools[0] }", TYPES, "true", False),
    ("boolSliceIndex", "{ .bools[-1] }", TYPES, "false", False),
    ("boolSubSlice", "{ .bools[0:2] }", TYPES, "true false", False),
    ("boolSubSliceFirst2", "{ .bools[:2] }", TYPES, "true false", False),
    ("boolSubSliceStep2", "{ .bools[:4:2] }", TYPES, "true true", False),
    ("integerSlice", "{ .integers }", TYPES, "[1,2,3,4]", False),
    ("integerSliceIndex", "{ .integers[0] }", TYPES, "1", False),
    ("integerSliceIndexReverse", "{ .integers[-2] }", TYPES, "3", False),
    ("integerSubSliceFirst2", "{ .integers[0:2] }", TYPES, "1 2", False),
    ("integerSubSliceFirst2Alt", "{ .integers[:2] }", TYPES, "1 2", False),
    ("integerSubSliceStep2", "{ .integers[:4:2] }", TYPES, "1 3", False),
    ("floatSlice", "{ .floats }", TYPES, "[1,2.2,3.3,4]", False),
    ("floatSliceIndex", "{ .floats[0] }", TYPES, "1", False),
    ("floatSliceIndexReverse", "{ .floats[-2] }", TYPES, "3.3", False),
    ("floatSubSliceFirst2", "{ .floats[0:2] }", TYPES, "1 2.2", False),
    ("floatSubSliceFirst2Alt", "{ .floats[:2] }", TYPES, "1 2.2", False),
    ("floatSubSliceStep2", "{ .floats[:4:2] }", TYPES, "1 3.3", False),
    ("stringSlice", "{ .strings }", TYPES, '["one","two","three","four"]', False),
    ("stringSliceIndex", "{ .strings[0] }", TYPES, "one", False),
    ("stringSliceIndexReverse", "{ .strings[-2] }", TYPES, "three", False),
    ("stringSubSliceFirst2", "{ .strings[0:2] }", TYPES, "one two", False),
    ("stringSubSliceFirst2Alt", "{ .strings[:2] }", TYPES, "one two", False),
    ("stringSubSliceStep2", "{ .strings[:4:2] }", TYPES, "one three", False),
    ("interfaceSlice", "{ .interfaces }", TYPES, '[true,"one",1,1.1]', False),
    ("interfaceSliceIndex", "{ .interfaces[0] }", TYPES, "true", False),
    ("interfaceSliceIndexReverse", "{ .interfaces[-2] }", TYPES, "1", False),
    ("interfaceSubSliceFirst2", "{ .interfaces[0:2] }", TYPES, "true one", False),
    ("interfaceSubSliceFirst2Alt", "{ .interfaces[:2] }", TYPES, "true one", False),
    ("interfaceSubSliceStep2", "{ .interfaces[:4:2] }", TYPES, "true 1", False),
    (
        "mapSlice",
        "{ .maps }",
        TYPES,
        '[{"name":"one","value":1},{"name":"two","value":2.02},{"name":"three","value":3.03},'
        '{"name":"four","value":4.04}]',
        False,
    ),
    ("mapSliceIndex", "{ .maps[0] }", TYPES, '{"name":"one","value":1}', False),
    ("mapSliceIndexReverse", "{ .maps[-2] }", TYPES, '{"name":"three","value":3.03}', False),
    (
        "mapSubSliceFirst2",
        "{ .maps[0:2] }",
        TYPES,
        '{"name":"one","value":1} {"name":"two","value":2.02}',
        False,
    ),
    (
        "mapSubSliceFirst2Alt",
        "{ .maps[:2] }",
        TYPES,
        '{"name":"one","value":1} {"name":"two","value":2.02}',
        False,
    ),
    (
        "mapSubSliceStepOdd",
        "{ .maps[::2] }",
        TYPES,
        '{"name":"one","value":1} {"name":"three","value":3.03}',
        False,
    ),
    (
        "mapSubSliceStepEven",
        "{ .maps[1::2] }",
        TYPES,
        '{"name":"two","value":2.02} {"name":"four","value":4.04}',
        False,
    ),
    # sorted keys
    ("structSliceIndex", "{ .structs[0] }", TYPES, '{"name":"one","type":"integer","value":1}', False),
    (
        "structSubSliceStepEven",
        "{ .structs[1::2] }",
        TYPES,
        '{"name":"two","type":"float","value":2.002} {"name":"four","type":"float","value":4.004}',
        False,
    ),
    # TestStructInput
    ("plain", "hello jsonpath", None, "hello jsonpath", False),
    ("recursive", "{..}", [1, 2, 3], "[1,2,3]", False),
    ("filter", "{[?(@<5)]}", [2, 6, 3, 7], "2 3", False),
    ("quote", '{"{"}', None, "{", False),
    ("union", "{[1,3,4]}", [0, 1, 2, 3, 4], "1 3 4", False),
    ("array", "{[0:2]}", ["Monday", "Tudesday"], "Monday Tudesday", False),
    ("variable", "hello {.Name}", STORE, "hello jsonpath", False),
    ("dict/", "{$.Labels.web/html}", STORE, "15", False),
    ("dict/", "{$.Employees.jason}", STORE, "manager", False),
    ("dict/", "{$.Employees.dan}", STORE, "clerk", False),
    ("dict-", "{.Labels.k8s-app}", STORE, "20", False),
    ("nest", "{.Bicycle[*].Color}", STORE, "red green", False),
    ("allarray", "{.Book[*].Author}", STORE, "Nigel Rees Evelyn Waugh Herman Melville", False),
    # sorted keys (a struct's @.* lists its fields in declaration order: red 19.95 true)
    (
        "allfields",
        '{range .Bicycle[*]}{ "{" }{ @.* }{ "} " }{end}',
        STORE,
        "{red 19.95 true} {green 20.01 false} ",
        False,
    ),
    ("recurfields", "{..Price}", STORE, "8.95 12.99 8.99 19.95 20.01", False),
    ("recurdotfields", "{...Price}", STORE, "8.95 12.99 8.99 19.95 20.01", False),
    (
        "superrecurfields",
        "{............................................................Price}",
        STORE,
        ERR,
        False,
    ),
    (
        "allstructsSlice",
        "{.Bicycle}",
        STORE,
        # sorted keys
        '[{"Color":"red","IsNew":true,"Price":19.95},{"Color":"green","IsNew":false,"Price":20.01}]',
        False,
    ),
    (
        "allstructs",
        '{range .Bicycle[*]}{ @ }{ " " }{end}',
        STORE,
        # sorted keys
        '{"Color":"red","IsNew":true,"Price":19.95} {"Color":"green","IsNew":false,"Price":20.01} ',
        False,
    ),
    (
        "lastarray",
        "{.Book[-1:]}",
        STORE,
        '{"Author":"Herman Melville","Category":"fiction","Price":8.99,"Title":"Moby Dick"}',  # sorted keys
        False,
    ),
    (
        "recurarray",
        "{..Book[2]}",
        STORE,
        '{"Author":"Herman Melville","Category":"fiction","Price":8.99,"Title":"Moby Dick"}',  # sorted keys
        False,
    ),
    ("bool", "{.Bicycle[?(@.IsNew==true)]}", STORE, '{"Color":"red","IsNew":true,"Price":19.95}', False),
    ("nonexistent field", "{.hello}", STORE, "", True),
    ("nonexistent field 2", "before-{.hello}after", STORE, "before-after", True),
    # TestJSONInput
    ("exists filter", "{[?(@.z)].id}", POINTS, "i2 i5", False),
    ("bracket key", "{[0]['id']}", POINTS, "i1", False),
    ("nil value", "{[-1]['x']}", POINTS, "null", False),
    # TestKubernetes
    (
        "range item",
        "{range .items[*]}{.metadata.name}, {end}{.kind}",
        NODES,
        "127.0.0.1, 127.0.0.2, List",
        False,
    ),
    (
        "range item with quote",
        '{range .items[*]}{.metadata.name}{"\\t"}{end}',
        NODES,
        "127.0.0.1\t127.0.0.2\t",
        False,
    ),
    (
        "range addresss",
        "{.items[*].status.addresses[*].address}",
        NODES,
        "127.0.0.1 127.0.0.2 127.0.0.3",
        False,
    ),
    (
        "double range",
        "{range .items[*]}{range .status.addresses[*]}{.address}, {end}{end}",
        NODES,
        "127.0.0.1, 127.0.0.2, 127.0.0.3, ",
        False,
    ),
    ("item name", "{.items[*].metadata.name}", NODES, "127.0.0.1 127.0.0.2", False),
    (
        "union nodes capacity",
        "{.items[*]['metadata.name', 'status.capacity']}",
        NODES,
        '127.0.0.1 127.0.0.2 {"cpu":"4"} {"cpu":"8"}',
        False,
    ),
    (
        "range nodes capacity",
        "{range .items[*]}[{.metadata.name}, {.status.capacity}] {end}",
        NODES,
        '[127.0.0.1, {"cpu":"4"}] [127.0.0.2, {"cpu":"8"}] ',
        False,
    ),
    ("user password", '{.users[?(@.name=="e2e")].user.password}', NODES, "secret", False),
    ("hostname", "{.items[0].metadata.labels.kubernetes\\.io/hostname}", NODES, "127.0.0.1", False),
    (
        "hostname filter",
        '{.items[?(@.metadata.labels.kubernetes\\.io/hostname=="127.0.0.1")].kind}',
        NODES,
        "None",
        False,
    ),
    ("bool item", "{.items[?(@..ready==true)].metadata.name}", NODES, "127.0.0.1", False),
    # TestEmptyRange
    ("empty range", "{range .items[*]}{.metadata.name}{end}", {"items": []}, "", True),
    (
        "empty nested range",
        '{range .items[*]}{.metadata.name}{":"}{range @.spec.containers[*]}{.name}{","}{end}{"+"}{end}',
        {"items": []},
        "",
        True,
    ),
    # TestNestedRanges
    (
        "nested range with a trailing newline",
        '{range .items[*]}{.metadata.name}{":"}{range @.spec.containers[*]}{.name}{","}{end}{"+"}{end}',
        PODS,
        "pod1:foo,bar,+pod2:baz,+",
        False,
    ),
    (
        "nested range with a trailing character within another nested range with a trailing newline",
        '{range .items[*]}{.metadata.name}{"~"}{range @.spec.containers[*]}{.name}{":"}'
        '{range @.another[*]}{.name}{","}{end}{"+"}{end}{"#"}{end}',
        PODS,
        "pod1~foo:value1,value2,+bar:value1,value2,+#pod2~baz:value1,value2,+#",
        False,
    ),
    (
        "two nested ranges at the same level with a trailing newline",
        '{range .items[*]}{.metadata.name}{"\\t"}{range @.spec.containers[*]}{.name}{" "}{end}{"\\t"}'
        '{range @.spec.containers[*]}{.name}{" "}{end}{"\\n"}{end}',
        PODS,
        "pod1\tfoo bar \tfoo bar \npod2\tbaz \tbaz \n",
        False,
    ),
    # TestFilterPartialMatchesSometimesMissingAnnotations
    (
        "filter, should only match a subset, some items don't have annotations, tolerate missing items",
        '{.items[?(@.metadata.annotations.color=="blue")].metadata.name}',
        ANNOTATED,
        "pod1 pod4",
        True,
    ),
    (
        "filter, should only match a subset, some items don't have annotations, error on missing items",
        '{.items[?(@.metadata.annotations.color=="blue")].metadata.name}',
        ANNOTATED,
        ERR,
        False,
    ),
    # TestNegativeIndex
    (
        "test containers[0], it equals containers[0]",
        "{.spec.containers[0].name}",
        containers(4),
        "fake0",
        False,
    ),
    (
        "test containers[0:0], it equals the empty set",
        "{.spec.containers[0:0].name}",
        containers(4),
        "",
        False,
    ),
    ("test containers[0:-1]", "{.spec.containers[0:-1].name}", containers(4), "fake0 fake1 fake2", False),
    ("test containers[-1:0], expect error", "{.spec.containers[-1:0].name}", containers(4), ERR, False),
    ("test containers[-1]", "{.spec.containers[-1].name}", containers(4), "fake3", False),
    ("test containers[-1:]", "{.spec.containers[-1:].name}", containers(4), "fake3", False),
    ("test containers[-2]", "{.spec.containers[-2].name}", containers(4), "fake2", False),
    ("test containers[-2:]", "{.spec.containers[-2:].name}", containers(4), "fake2 fake3", False),
    ("test containers[-3]", "{.spec.containers[-3].name}", containers(4), "fake1", False),
    ("test containers[-4]", "{.spec.containers[-4].name}", containers(4), "fake0", False),
    ("test containers[-4:]", "{.spec.containers[-4:].name}", containers(4), "fake0 fake1 fake2 fake3", False),
    ("test containers[-5], out of bounds", "{.spec.containers[-5].name}", containers(4), ERR, False),
    ("test containers[5:5], expect empty set", "{.spec.containers[5:5].name}", containers(4), "", False),
    ("test containers[-5:-5], expect empty set", "{.spec.containers[-5:-5].name}", containers(4), "", False),
    (
        "test containers[3:1], start greater than end",
        "{.spec.containers[3:1].name}",
        containers(4),
        ERR,
        False,
    ),
    (
        "test containers[-1:-2], start greater than end",
        "{.spec.containers[-1:-2].name}",
        containers(4),
        ERR,
        False,
    ),
    # TestRunningPodsJSONPathOutput
    (
        "range over pods without selecting the last one",
        '{range .items[?(.status.phase=="Running")]}{.metadata.name}{" is Running\\n"}{end}',
        RUNNING,
        "pod1 is Running\npod2 is Running\npod3 is Running\n",
        True,
    ),
    # TestStep
    (
        "test containers[0:]",
        "{.spec.containers[0:].name}",
        containers(6),
        "fake0 fake1 fake2 fake3 fake4 fake5",
        False,
    ),
    (
        "test containers[0:6:]",
        "{.spec.containers[0:6:].name}",
        containers(6),
        "fake0 fake1 fake2 fake3 fake4 fake5",
        False,
    ),
    (
        "test containers[0:6:1]",
        "{.spec.containers[0:6:1].name}",
        containers(6),
        "fake0 fake1 fake2 fake3 fake4 fake5",
        False,
    ),
    ("test containers[0:6:0], it errors", "{.spec.containers[0:6:0].name}", containers(6), ERR, False),
    ("test containers[0:6:-1], it errors", "{.spec.containers[0:6:-1].name}", containers(6), ERR, False),
    ("test containers[1:4:2]", "{.spec.containers[1:4:2].name}", containers(6), "fake1 fake3", False),
    ("test containers[1:4:3]", "{.spec.containers[1:4:3].name}", containers(6), "fake1", False),
    ("test containers[1:4:4]", "{.spec.containers[1:4:4].name}", containers(6), "fake1", False),
    ("test containers[0:6:2]", "{.spec.containers[0:6:2].name}", containers(6), "fake0 fake2 fake4", False),
    ("test containers[0:6:3]", "{.spec.containers[0:6:3].name}", containers(6), "fake0 fake3", False),
    ("test containers[0:6:5]", "{.spec.containers[0:6:5].name}", containers(6), "fake0 fake5", False),
    ("test containers[0:6:6]", "{.spec.containers[0:6:6].name}", containers(6), "fake0", False),
]


@pytest.mark.parametrize(
    ("name", "template", "data", "expect", "allow_missing"), CASES, ids=[c[0] for c in CASES]
)
def test_client_go_table(name, template, data, expect, allow_missing) -> None:
    if expect is ERR:
        with pytest.raises(JSONPathError):
            JSONPath(template, allow_missing_keys=allow_missing).execute(data)
        return
    assert JSONPath(template, allow_missing_keys=allow_missing).execute(data) == expect


# client-go's testFailJSONPath: the error text itself
FAILS = [
    ("invalid identifier", "{hello}", "unrecognized identifier hello"),
    ("nonexistent field", "{.hello}", "hello is not found"),
    ("invalid array", "{.Labels[0]}", "map[string]interface {} is not array or slice"),  # Go: map[string]int
    ("invalid filter operator", "{.Book[?(@.Price<>10)]}", "unrecognized filter operator <>"),
    ("redundant end", "{range .Labels.*}{@}{end}{end}", "not in range, nothing to end"),
]


@pytest.mark.parametrize(("name", "template", "message"), FAILS, ids=[f[0] for f in FAILS])
def test_client_go_failures(name, template, message) -> None:
    with pytest.raises(JSONPathError) as e:
        JSONPath(template, allow_missing_keys=False).execute(STORE)
    assert str(e.value) == message


# client-go's testJSONPathSortOutput: a map's values in any order
def test_recursive_name_in_any_order() -> None:
    out = JSONPath("{..name}", allow_missing_keys=False).execute(NODES)
    assert sorted(out.split()) == sorted(["127.0.0.1", "127.0.0.2", "myself", "e2e"])


# parser_test.go's failures
@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{.hello", "unclosed action"),
        ("{.hello[abc]}", "invalid array index abc"),
        ("{.hello[?(@.x==1]}", "unterminated filter"),
        ('{"hello}', "unterminated quoted string"),
        ("{.hello[1}", "unterminated array"),
        ("{....a}", "invalid multiple recursive descent"),
    ],
)
def test_parse_errors(template, message) -> None:
    with pytest.raises(JSONPathError) as e:
        JSONPath(template)
    assert str(e.value) == message


@pytest.mark.parametrize(
    ("expr", "out"),
    [("a.b", "{.a.b}"), (".a.b", "{.a.b}"), ("{a.b}", "{.a.b}"), ("{.a.b}", "{.a.b}"), ("", "")],
)
def test_relaxed_expression(expr, out) -> None:
    assert relaxed(expr) == out


def test_relaxed_refuses_a_template() -> None:
    with pytest.raises(JSONPathError):
        relaxed("{.a}{.b}")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ({"b": 1, "a": [1, "x"]}, "map[a:[1 x] b:1]"),
        (None, "<nil>"),
        (True, "true"),
        (1e6, "1e+06"),
        (2.5, "2.5"),
    ],
)
def test_cells_print_as_go_sprint(value, text) -> None:
    assert go_sprint(value) == text
