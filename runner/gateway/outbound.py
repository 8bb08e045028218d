"""Where a gateway call goes once it may be sent (server.py has admitted, looked up, gated and reserved it):
through the providers' batch APIs when its run is batched and the API takes it (batcher.py), else upstream
through the shared budget with retries (upstream.py); with the provider's credentials in place of the
caller's, and on the simulator with the model that plays the one asked for."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Mapping
from pathlib import Path

import aiohttp
from aiohttp import web
from loguru import logger

from runner.budget.ratelimit import Budget
from runner.config import CLOUDS, api_key
from runner.gateway.batch_api import BATCH_PATHS, AwsBatch, BatchEndpoint, BatchRefused, GcpBatch
from runner.gateway.batcher import CARRIED, INTERACTIVE, Batcher
from runner.gateway.cloud_auth import aws_signer, bedrock_signer, credential_headers
from runner.gateway.incoming import Incoming
from runner.gateway.journal import Journal
from runner.gateway.replay import as_stream
from runner.gateway.request import upstream_url
from runner.gateway.settings import GatewaySettings
from runner.gateway.upstream import Upstream, UpstreamAnswer, UpstreamCall
from runner.gateway.usage import from_body
from runner.models.base import TRIAL_HEADER
from runner.models.usage import Tokens

# Headers that describe the caller or the hop, not the request: never forwarded.
_HOP = {"host", "content-length", "connection", "accept-encoding", "transfer-encoding", "keep-alive"}
# a caller's credentials: swapped for the provider's (Azure's api-key; a caller's SigV4 signature, made for
# the gateway's address, is replaced by the gateway's own)
_KEYS = {
    "x-api-key",
    "authorization",
    "x-runner-token",
    "api-key",
    "x-amz-date",
    "x-amz-security-token",
    "x-amz-content-sha256",
}
SIM_DEFAULT = "sim-strong"  # who plays a model the simulator does not know


class Outbound:
    """The gateway's way out: its upstream session, and its batcher in batch mode. `trials`: the trial each
    worker runs now (the gateway's, read at each call); `token`: the run's, which never leaves."""

    def __init__(
        self, settings: GatewaySettings, limiter: Budget | None, token: str | None, trials: Mapping[str, int]
    ) -> None:
        self.settings, self.limiter, self.token, self.trials = settings, limiter, token, trials
        self.upstream: Upstream | None = None
        self.batcher: Batcher | None = None

    def open(self, session: aiohttp.ClientSession) -> None:
        """Start sending through `session` (closed with `close`); a journal's batches left by an earlier run
        are collected again."""
        batch = self.settings.batch
        self.upstream = Upstream(self.settings.retry, self.limiter, session)
        if batch is not None:
            journal = Journal(Path(self.settings.journal)) if self.settings.journal else None
            self.batcher = Batcher(session, batch, journal)
            pending = journal.pending() if journal is not None else []
            unknown = journal.unknown() if journal is not None else []
            if pending or unknown:
                logger.info(
                    "{} batch(es) left out by an earlier run: collecting them{}",
                    len(pending),
                    f"; {len(unknown)} it was creating when it stopped: looking for them" if unknown else "",
                )
                self.batcher.resume(
                    [(batch_endpoint(self.settings, p, {}), bid, keys) for p, bid, keys in pending],
                    [(batch_endpoint(self.settings, i.provider, {}, i.path), i) for i in unknown],
                )

    async def close(self) -> None:
        if self.batcher is not None:
            await self.batcher.close()
        if self.upstream is not None:
            await self.upstream.session.close()

    def session(self) -> aiohttp.ClientSession:
        assert self.upstream is not None, "the gateway is not open"
        return self.upstream.session

    async def forward(self, request: web.Request, call: Incoming) -> UpstreamAnswer:
        s = self.settings
        if self.batcher is not None and ("*" in s.batch_runs or call.run in s.batch_runs):
            # (a Bedrock stream is AWS event-stream framed: a batch's answer is not turned into one)
            if (
                call.path in BATCH_PATHS
                and call.body is not None
                and not (call.provider == "bedrock" and call.streaming)
            ):
                answer = await self._batched(request, call)
                if answer is not None:
                    return answer
            else:  # what the batch APIs do not take (count_tokens, a Bedrock stream) goes as it came
                self.batcher.stats["interactive_unbatchable"] += 1
        raw = call.raw
        cloud = call.provider in CLOUDS
        if s.sim_models is not None and call.body is not None and call.model and not cloud:
            raw = json.dumps({**call.body, "model": sim_model(self.settings, call.model)}).encode()
        if cloud and call.provider not in s.upstreams:
            return _not_set_up(call.provider)
        url = (
            upstream_url(s.upstreams[call.provider], call.provider, call.path)
            if not cloud
            else s.upstreams[call.provider]
            + call.route.upstream_path
            + (f"?{call.query}" if call.query else "")
        )
        sign = None
        if call.provider == "bedrock":
            if s.bedrock_region is None:
                return _not_set_up("bedrock")
            sign = bedrock_signer(s.bedrock_region, s.bedrock_profile, simulated=s.sim_models is not None)
        assert self.upstream is not None
        return await self.upstream.send(
            request,
            UpstreamCall(
                call.provider,
                url,
                raw,
                await self.headers(request, call),
                call.streaming,
                self._slot(call.provider, call.priced_as),
                self.limiter.run_index(call.run) if self.limiter is not None else -1,
                sign=sign,
                event_stream=call.route.event_stream,
            ),
        )

    async def _batched(self, request: web.Request, call: Incoming) -> UpstreamAnswer | None:
        """Through a batch: held with others, answered when its result arrives; a streaming caller gets its
        stream cut from the final message. None: past its batches' retries, it goes interactive."""
        assert self.batcher is not None and call.body is not None
        body = dict(call.body)
        if call.provider in ("bedrock", "vertex"):  # a record's input is the cloud's body as it came
            if (
                self.settings.bedrock_batch if call.provider == "bedrock" else self.settings.vertex_batch
            ) is None:
                self.batcher.stats["interactive_unbatchable"] += 1
                return None
        elif call.provider == "azure":  # the lines name the deployment's Global-Batch deployment
            made = self.settings.batch_deployments
            body["model"] = made.get(call.model) or made.get("*", call.model)
        elif self.settings.sim_models is not None and call.model:
            body["model"] = sim_model(self.settings, call.model)
        headers = await self.headers(request, call)
        ep = batch_endpoint(self.settings, call.provider, headers, call.path, model=call.model or "")
        told = self.trials.get(call.worker or "", 1)

        def gone() -> bool:  # the caller hung up (an SDK that timed out waiting, and may ask again)
            return request.transport is None or request.transport.is_closing()

        status, answer = await self.batcher.send(
            ep, call.model, body, salt=f"trial {told}" if told > 1 else "", gone=gone
        )
        if (status, answer) == INTERACTIVE:
            return None
        usage = from_body(answer, call.provider) if status == 200 else Tokens()
        if (
            status == 200
            and call.streaming
            and (stream := as_stream(call.path, answer, call.body)) is not None
        ):
            # (Azure's: SSE)
            return UpstreamAnswer(200, stream, "text/event-stream", usage=usage, batched=True)
        return UpstreamAnswer(
            status, json.dumps(answer).encode(), "application/json", usage=usage, batched=True
        )

    async def headers(self, request: web.Request, call: Incoming) -> dict[str, str]:
        """The caller's headers with its key swapped for the provider's (the run's token never leaves)."""
        provider, model = call.provider, call.priced_as
        simulated = self.settings.sim_models is not None
        headers = {
            k: v for k, v in request.headers.items() if k.lower() not in _HOP and k.lower() not in _KEYS
        }
        if provider in CLOUDS:  # the gateway's own credentials (a Google token may be refreshed: in a thread)
            headers.update(await asyncio.to_thread(credential_headers, provider, simulated=simulated))
        elif self.token is None and any(k.lower() in ("x-api-key", "authorization") for k in request.headers):
            headers.update(
                {k: v for k, v in request.headers.items() if k.lower() in ("x-api-key", "authorization")}
            )
        elif key := api_key(provider) or ("sim-key" if simulated else None):
            headers.update(
                {"x-api-key": key} if provider == "anthropic" else {"authorization": f"Bearer {key}"}
            )
        if simulated and model and provider not in CLOUDS:  # a cloud's path names its model itself
            headers["x-sim-plays"] = model
            if (told := self.trials.get(call.worker or "", 1)) > 1:
                headers[TRIAL_HEADER] = str(told)
        return headers

    def _slot(self, provider: str, model: str) -> int | None:
        keys = self.settings.limit_keys
        key = keys.get(f"{provider}/{model}") or keys.get(provider)
        if self.limiter is None or key is None or key not in self.limiter.keys:
            return None
        return self.limiter.slot(key)


def sim_model(settings: GatewaySettings, model: str) -> str:
    """Who plays a model on the simulator: the mapping's, a simulator model asked for by its name (the
    built-in agents do), else the default."""
    assert settings.sim_models is not None
    return settings.sim_models.get(model, model if model.startswith("sim-") else SIM_DEFAULT)


def batch_endpoint(
    settings: GatewaySettings, provider: str, headers: dict[str, str], path: str = "", model: str = ""
) -> BatchEndpoint:
    """Where a batch of this provider goes, with what of a caller's headers it carries; a batch left by an
    earlier gateway is polled with the environment's key (keys are never journaled), or on the simulator
    with a stand-in. Bedrock's is signed for each request, Vertex AI's carries a token fetched for each
    (`model`: the model id their jobs name)."""
    if provider == "vertex":
        v = settings.vertex_batch
        if v is None:
            raise BatchRefused(400, "Vertex AI batch prediction is not set up (vertex.batch_gcs_uri)", None)
        simulated = settings.sim_models is not None
        auth = functools.partial(credential_headers, "vertex", simulated=simulated)
        return BatchEndpoint(
            provider,
            v.control,
            {},
            path,
            model=model,
            gcp=GcpBatch(v.control, v.storage, v.bucket, v.prefix, auth),
        )
    if provider == "bedrock":
        b, region = settings.bedrock_batch, settings.bedrock_region
        if b is None or region is None:
            raise BatchRefused(
                400,
                "Bedrock batch inference is not set up (bedrock.batch_s3_uri, bedrock.batch_role_arn)",
                None,
            )
        sign = aws_signer(region, settings.bedrock_profile, simulated=settings.sim_models is not None)
        return BatchEndpoint(
            provider,
            b.control,
            {},
            path,
            AwsBatch(b.control, b.s3, b.bucket, b.prefix, b.role_arn, sign),
            model,
        )
    carried = {k: v for k, v in headers.items() if k.lower() in CARRIED}
    if provider == "azure" and not any(k.lower() in ("api-key", "authorization") for k in carried):
        carried.update(credential_headers("azure", simulated=settings.sim_models is not None))
    key = api_key(provider) or ("sim-key" if settings.sim_models is not None else None)
    if provider != "azure" and not any(k.lower() in ("x-api-key", "authorization") for k in carried) and key:
        carried.update({"x-api-key": key} if provider == "anthropic" else {"authorization": f"Bearer {key}"})
    if provider == "anthropic":
        carried.setdefault("anthropic-version", "2023-06-01")
    return BatchEndpoint(provider, settings.upstreams[provider], carried, path)


def _not_set_up(provider: str) -> UpstreamAnswer:
    """A cloud the gateway was given no endpoint or region for: what to set, as a 400 the caller reads."""
    what = {
        "bedrock": "bedrock.region (or AWS_REGION)",
        "vertex": "vertex.project and vertex.region (or ANTHROPIC_VERTEX_PROJECT_ID and CLOUD_ML_REGION)",
        "azure": "azure.endpoint (or AZURE_OPENAI_ENDPOINT)",
    }
    message = f"the gateway has no {provider} endpoint: set {what[provider]} in its config"
    body = {"error": {"type": "invalid_request_error", "message": message}}
    return UpstreamAnswer(400, json.dumps(body).encode(), "application/json")
