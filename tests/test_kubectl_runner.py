"""doubles.kubectl: which failures of the real kubectl the tests try again (the words are kubectl's own)."""
from doubles.kubectl import again

# What CI printed when a loaded API server did not build /openapi/v2 within kubectl's 32 s (test_gitrepo_e2e).
OPENAPI = ('error: error validating "agent.json": error validating data: Get "https://127.0.0.1:13228/openapi/v2?'
           'timeout=32s": net/http: request canceled (Client.Timeout exceeded while awaiting headers); if you choose '
           'to ignore these errors, turn validation off with --validate=false')
DISCOVERY = ('E1130 07:40:01.000000 memcache.go:265] couldn\'t get current server API group list: Get '
             '"https://127.0.0.1:6443/api?timeout=30s": net/http: TLS handshake timeout')
WRITE = ('Error from server: error when creating "x.json": Post "https://127.0.0.1:6443/api/v1/namespaces": '
         'net/http: request canceled (Client.Timeout exceeded while awaiting headers)')


def test_an_unanswered_read_of_a_command_that_is_the_same_twice_is_tried_again():
    assert again(("apply", "-f", "agent.json"), OPENAPI)
    assert again(("-n", "acme", "get", "hubclusters"), DISCOVERY)
    assert again(("--namespace", "apply", "explain", "hubclusters"), DISCOVERY)  # "apply" is the namespace here


def test_a_write_or_a_command_that_differs_when_repeated_is_not():
    assert not again(("create", "namespace", "x"), DISCOVERY)
    assert not again(("delete", "-f", "-"), OPENAPI)
    assert not again(("apply", "-f", "x.json"), WRITE)
    assert not again(("apply", "-f", "x.json"), 'The Cluster "r" is invalid: spec.region: Invalid value')
