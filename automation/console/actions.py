"""The console's two actions on a cluster, each a POST from its page (with the session's CSRF token), each checked
with a SubjectAccessReview for `patch` on the HubCluster, each made with the viewer's own token (so the console
holds no right to patch anything, and the API server's audit log names the viewer), and each written to the
console's audit log:

    reconcile   the reconcile-request annotation: an `up` with refresh now
    drift       the drift-check-request annotation: a drift check (preview with refresh) now

The annotation's value says when and who; the service records the value it handled in the cluster's status.
"""
from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import RedirectResponse
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.kube.calls import error_text
from automation.console.app import AUDIT, LOG, checked_post, console, form
from automation.console.pages import NOT_FOUND, may_see
from stacks.names import CLUSTERS, DRIFT_CHECK_REQUEST_ANNOTATION, GROUP, RECONCILE_REQUEST_ANNOTATION, VERSION
from stacks.times import rfc3339_seconds

router = APIRouter()
ACTIONS = {"reconcile": RECONCILE_REQUEST_ANNOTATION, "drift": DRIFT_CHECK_REQUEST_ANNOTATION}


@router.post("/clusters/{namespace}/{name}/{action}")
async def act(request: Request, namespace: str, name: str, action: str) -> RedirectResponse:
    c = console(request)
    signed = checked_post(request, await form(request))
    annotation = ACTIONS.get(action)
    if annotation is None or c.cache.row(namespace, name) is None or not may_see(c, signed, namespace):
        raise HTTPException(404, NOT_FOUND)
    if not c.access.allowed(signed.viewer, namespace, CLUSTERS, "patch"):
        raise HTTPException(403, "You may not change this cluster (patch on hubclusters in its namespace).")
    value = f"{rfc3339_seconds(c.sessions.clock())} by {signed.viewer.user}"[:256]
    api = client.CustomObjectsApi(c.callers.get(signed.token))
    try:
        api.patch_namespaced_custom_object(GROUP, VERSION, namespace, CLUSTERS, name,
                                           {"metadata": {"annotations": {annotation: value}}})
    except ApiException as exc:
        LOG.warning("%s on %s/%s as %s: %s", action, namespace, name, signed.viewer.user, error_text(exc))
        AUDIT.info("%s %s/%s by %s: refused (%s)", action, namespace, name, signed.viewer.user, exc.status)
        raise HTTPException(403 if exc.status == 403 else 502,
                            "The hub's API server refused the change." if exc.status == 403 else
                            "The change could not be made now; try again.") from None
    AUDIT.info("%s %s/%s by %s: %s=%s", action, namespace, name, signed.viewer.user, annotation, value)
    return RedirectResponse(f"/clusters/{namespace}/{name}?requested={action}", status_code=303)
