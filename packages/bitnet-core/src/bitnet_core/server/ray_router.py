"""Prefix-aware routing for ``bitnet serve-ray``: a conversation goes to the replica that holds it.

Each replica keeps its own prefix cache (``model/prefix_cache.py``), so a
chat's next turn is cheap only on the replica that answered the turn before.
Ray's HTTP proxy routes before it reads the body, so the prompt's tokens are
not there to hash; the conversation is named instead by Ray Serve's session
header (``x-session-id``, or ``RAY_SERVE_SESSION_ID_HEADER_KEY``), which the
proxy puts into the request's metadata. ``PrefixAffinityRouter`` (a Ray Serve
``RequestRouter``) ranks the replicas by rendezvous hashing of that session
id: the first is the session's home; when it is full (``max_ongoing_requests``
requests running), the request goes to the least loaded of the others. A
request without the header goes to the least loaded replica, ties broken at
random (Ray takes the first of equal queues, so an unshuffled list would send
every such request of an idle deployment to one replica). A dead replica
leaves the candidates, so its sessions move to their next replica in the
ranking, and failover stays Ray's.
"""

from __future__ import annotations

import hashlib
import random

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica


def affinity(session: str, replica: str) -> int:
    """The rendezvous score of ``replica`` for ``session`` (highest wins; stable everywhere)."""
    digest = hashlib.sha256(f"{session}\0{replica}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def session_of(request: PendingRequest | None) -> str:
    return getattr(getattr(request, "metadata", None), "session_id", "") or ""


class PrefixAffinityRouter(RequestRouter):
    """Sessions to their home replica, the rest (and a full home) to the least loaded."""

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        if pending_request is not None:
            pending_request.routing_context.should_backoff = True  # all full: wait, then retry
        session = session_of(pending_request)
        if not session:  # the lowest queue among them is chosen, the first of equal ones
            return [random.sample(candidate_replicas, len(candidate_replicas))]
        ranked = sorted(
            candidate_replicas,
            key=lambda r: affinity(session, r.replica_id.unique_id),
            reverse=True,
        )
        return [ranked[:1], ranked[1:]]
