"""The few Label Studio REST calls certsel makes (httpx; tested against label-studio 1.23).

Authentication is the ``Authorization: Token <key>`` header (legacy API tokens; ``deploy/label-studio/serve.sh`` enables
them); the key is read from an environment variable and never appears in an error, log line or ``repr``. Every failure
is a one-line :class:`LabelStudioError` naming what went wrong, with the HTTP status when there is one.

The calls (what the server answers: ``deploy/label-studio/NOTES.md``): ``GET /api/current-user/whoami``; ``GET
/api/projects/{id}``, ``GET /api/projects`` (paged), ``POST /api/projects``; ``POST
/api/projects/{id}/import?return_task_ids=true``; ``GET /api/tasks?project=&page=&page_size=`` (a page past the end is a
404), ``GET /api/tasks/{id}``; ``DELETE /api/annotations/{id}``; ``POST``/``GET``/``DELETE /api/webhooks``; ``POST
/api/dm/actions?id=delete_tasks&project=`` (deletes tasks by id).
"""

from __future__ import annotations

import os

import httpx
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from certsel.errors import CertselError


class LabelStudioError(CertselError):
    """A Label Studio call that failed (one line; ``status``: the HTTP status, if any)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class _Retry(Exception):
    """A failure worth another try (connection trouble, a 5xx)."""


def token_from(env: str) -> str:
    """The API key in environment variable ``env`` (an error naming the variable if unset)."""
    key = os.environ.get(env, "")
    if not key.strip():
        raise LabelStudioError(f"environment variable {env} (the Label Studio API token) is not set")
    return key.strip()


class LabelStudioClient:
    """A Label Studio server at ``url`` (see the module docstring)."""

    def __init__(self, url: str, token: str, *, timeout: float = 30.0, retries: int = 2):
        self.url = url.rstrip("/")
        try:
            self._http = httpx.Client(base_url=self.url, timeout=timeout,
                                      headers={"Authorization": f"Token {token}", "Accept": "application/json"})
        except httpx.InvalidURL as exc:
            raise LabelStudioError(f"not a usable Label Studio address {self.url!r} ({exc})") from None
        self.retries = int(retries)

    def __repr__(self) -> str:  # never the token
        return f"LabelStudioClient({self.url!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _send(self, method: str, path: str, what: str, ok=(200, 201, 204), missing_ok: bool = False, **kw):
        """The JSON answer of one call (retried on connection trouble and 5xx); with ``missing_ok`` a 404 is None (a
        task or annotation that no longer exists)."""
        def once():
            try:
                resp = self._http.request(method, path, **kw)
            except httpx.InvalidURL as exc:
                raise LabelStudioError(f"not a usable Label Studio address {self.url!r} ({exc})") from None
            except httpx.TransportError as exc:
                raise _Retry(f"cannot reach Label Studio at {self.url} ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else 'no answer'})") from None
            if resp.status_code >= 500:
                raise _Retry(f"Label Studio at {self.url} answered {resp.status_code} to {what}")
            return resp

        try:
            resp = Retrying(stop=stop_after_attempt(self.retries + 1), wait=wait_exponential(multiplier=0.2, max=5),
                            retry=retry_if_exception_type(_Retry), reraise=True)(once)
        except _Retry as exc:
            raise LabelStudioError(str(exc)) from None
        if missing_ok and resp.status_code == 404:
            return None
        if resp.status_code not in ok:
            raise LabelStudioError(self._refusal(resp, what), resp.status_code)
        return resp.json() if resp.content else None

    def _refusal(self, resp, what: str) -> str:
        try:
            body = resp.json()
            detail = body.get("detail") or body.get("validation_errors") or body
        except ValueError:
            detail = resp.text[:200]
        detail = " ".join(str(detail).split())[:300]
        if resp.status_code == 401:
            return f"Label Studio at {self.url} refused the API token (401: {detail})"
        if resp.status_code == 403:
            return f"Label Studio at {self.url} does not allow {what} with this token (403: {detail})"
        return f"Label Studio at {self.url}: {what} failed ({resp.status_code}: {detail})"

    # -- calls -------------------------------------------------------------------------------
    def whoami(self) -> dict:
        return self._send("GET", "/api/current-user/whoami", "checking the token")

    def project(self, project_id: int) -> dict:
        try:
            return self._send("GET", f"/api/projects/{int(project_id)}", f"reading project {project_id}")
        except LabelStudioError as err:
            if err.status == 404:
                raise LabelStudioError(f"Label Studio at {self.url} has no project {project_id}", 404) from None
            raise

    def projects(self) -> list[dict]:
        out, page = [], 1
        while True:
            got = self._send("GET", "/api/projects", "listing projects", params={"page": page, "page_size": 100})
            out.extend(got.get("results", []))
            if not got.get("next"):
                return out
            page += 1

    def create_project(self, **fields) -> dict:
        return self._send("POST", "/api/projects", "creating the project", json=fields)

    def import_tasks(self, project_id: int, data: list[dict]) -> list[int]:
        """Import one task per data dict; their ids, in order."""
        if not data:
            return []
        got = self._send("POST", f"/api/projects/{int(project_id)}/import", "importing tasks",
                         params={"return_task_ids": "true"}, json=[{"data": d} for d in data])
        ids = [int(i) for i in got.get("task_ids", [])]
        if len(ids) != len(data):
            raise LabelStudioError(f"Label Studio at {self.url} returned {len(ids)} task ids for {len(data)} tasks")
        return ids

    def tasks(self, project_id: int) -> list[dict]:
        """Every task of a project (id, data, counters), page by page."""
        out, page, size = [], 1, 500
        while True:
            try:
                got = self._send("GET", "/api/tasks", "listing tasks",
                                 params={"project": int(project_id), "page": page, "page_size": size})
            except LabelStudioError as err:
                if err.status == 404 and page > 1:  # a page past the end
                    return out
                raise
            out.extend(got.get("tasks", []))
            if page * size >= int(got.get("total", 0)):
                return out
            page += 1

    def task(self, task_id: int) -> dict | None:
        """A task with its data and annotations (None: it no longer exists)."""
        return self._send("GET", f"/api/tasks/{int(task_id)}", "reading a task", missing_ok=True)

    def delete_tasks(self, project_id: int, task_ids: list[int]) -> int:
        """Delete tasks (gone from every annotator's queue); how many the server deleted."""
        if not task_ids:
            return 0
        got = self._send("POST", "/api/dm/actions", "deleting tasks",
                         params={"id": "delete_tasks", "project": int(project_id)},
                         json={"selectedItems": {"all": False, "included": [int(i) for i in task_ids]}})
        return int((got or {}).get("processed_items", len(task_ids)))

    def create_webhook(self, project_id: int, url: str, headers: dict, actions: list[str]) -> int:
        """A webhook of the project posting ``actions`` to ``url`` (without payloads); its id."""
        got = self._send("POST", "/api/webhooks", "creating a webhook", json={
            "project": int(project_id), "url": url, "headers": headers, "send_payload": False,
            "send_for_all_actions": False, "actions": actions, "is_active": True})
        return int(got["id"])

    def delete_webhook(self, webhook_id: int) -> None:
        self._send("DELETE", f"/api/webhooks/{int(webhook_id)}", "deleting a webhook")

    def delete_annotation(self, annotation_id: int) -> None:
        """Remove an annotation (its task goes back to the annotators' queue)."""
        self._send("DELETE", f"/api/annotations/{int(annotation_id)}", "deleting an annotation", missing_ok=True)

    def webhooks(self, project_id: int) -> list[dict]:
        return self._send("GET", "/api/webhooks", "listing webhooks", params={"project": int(project_id)}) or []
