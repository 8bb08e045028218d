"""The one way agents call a model: cache, shared rate limit, provider, retries -- in that order.

Retries live here only (the SDKs' own are off), by the policy the gateway follows too
(runner/models/retry.py): rate-limit answers pause the shared budget for every worker; transient errors
back off exponentially with full jitter, bounded by attempts and a total time cap. A request the
provider rejects (400, 413, 422) fails this conversation only (ProviderRejected); auth, permission,
unknown model, exhausted quota and billing stop the run (ProviderFatal), since every later call would
fail the same way.

What is sent follows the model's capabilities (models/capabilities.py): sampling parameters it
does not accept are left out, and costs use its prices, cache reads and writes included.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from loguru import logger

from runner.budget.gates import Gates, Refused
from runner.budget.ratelimit import Budget, budget_key
from runner.budget.spend import JOB, Spend, Spent
from runner.cache import ResponseCache
from runner.config import (
    API_KEY_ENV,
    CLOUD_KEY_ENV,
    CLOUDS,
    ModelRef,
    RetrySettings,
    api_key,
    environment,
    sdk_base_url,
)
from runner.errors import ConfigError, ProviderFatal, ProviderGaveUp, ProviderRejected, RunRefused
from runner.models.base import SIM_MODEL_HEADER, Completion, Provider, ProviderError, Request, trial
from runner.models.capabilities import Capabilities, lookup, split_sampling
from runner.models.live import Catalogue
from runner.models.retry import RetryPolicy
from runner.models.settings import ClientSettings
from runner.models.thinking import ThinkingChoice, ThinkingPlan, thinking_choice
from runner.models.thinking import plan as plan_thinking
from runner.models.usage import Counts, Tokens, budget_input_tokens, cost
from runner.models.wire import retries_taken, sim_trial

# Refusals that every request of a run repeats (its settings, not one conversation's content): a 413 is one
# conversation's length, a 404 or 401 stops the whole job already (ProviderFatal).
REPEATING_STATUSES = frozenset({400, 422})


class ModelClient:
    def __init__(
        self,
        provider: Provider,
        *,
        wire_model: str,
        logical_model: str,
        limiter: Budget | None,
        limiter_slot: int | None,
        cache: ResponseCache | None,
        retry: RetrySettings,
        caps: Capabilities | None = None,
        prompt_cache: bool = True,
        thinking: ThinkingChoice | None = None,
        simulated: bool = False,
        gate: tuple[Gates, str] | None = None,
        run: str | None = None,
    ) -> None:
        self.provider, self.wire_model, self.logical_model = provider, wire_model, logical_model
        self.simulated = simulated  # the simulator answers: it is told each call's trial
        self.limiter, self.slot, self.cache, self.retry = limiter, limiter_slot, cache, retry
        self.caps = caps or lookup(logical_model, provider.name)
        self.prompt_cache = prompt_cache
        self.thinking = thinking or ThinkingChoice()
        self._plans: dict[int, ThinkingPlan] = {}  # by the answer's limit: one per run, in practice
        self.stats = Counts()
        self.gate = gate  # the run's first-call gate (runner/budget/gates.py) and this client's key in it
        self.run = limiter.run_index(run) if limiter is not None else -1  # whose calls the budget counts
        self.run_name = run
        # the caps on what the job and its runs spend
        self.spend: Spend | None = getattr(limiter, "spend", None)

    def thinking_plan(self, answer_tokens: int) -> ThinkingPlan:
        p = self._plans.get(answer_tokens)
        if p is None:
            p = self._plans[answer_tokens] = plan_thinking(
                self.caps, self.logical_model, self.thinking, answer_tokens
            )
        return p

    def wire_request(self, req: Request) -> tuple[Request, list[str]]:
        """The request as sent (the model's wire name, only the sampling it accepts, its thinking settings and
        an output limit with room for them); and what was left out."""
        sent, dropped = split_sampling(self.caps, {"temperature": req.temperature})
        p = self.thinking_plan(req.max_output_tokens)
        return replace(
            req,
            model=self.wire_model,
            sampling=sent,
            prompt_cache=self.prompt_cache,
            max_output_tokens=p.max_tokens,
            thinking=p.params or None,
        ), dropped

    def complete(self, req: Request) -> Completion:
        req, _ = self.wire_request(req)
        self.stats.llm_calls += 1
        key = req.cache_key(self.provider.name) if self.cache is not None else ""
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                self.stats.cache_hits += 1
                c = Completion.from_dict(hit)
                c.cached, c.latency_seconds, c.attempts = True, 0.0, 0
                c.cost_usd, c.input_cost_usd, c.cache_saved_usd = 0.0, 0.0, 0.0
                return c
            self.stats.cache_misses += 1
        c = self._through_gate(req)
        self._account(c)
        if self.cache is not None:
            self.cache.put(key, self.provider.name, self.logical_model, c.to_dict())
        return c

    def _through_gate(self, req: Request) -> Completion:
        """The call, past its run's gate: the first of the run goes alone, and a refusal every request of the
        run repeats stops the run (RunRefused) instead of failing one record after another."""
        if self.gate is None:
            return self._with_retries(req)
        gates, key = self.gate
        run = key.split("/", 1)[0]
        try:
            probing = gates.enter(key, deadline=time.monotonic() + self.retry.total_cap_seconds)
        except Refused as e:
            raise RunRefused(f"not sent: {e}", run=run, sent=False) from None
        try:
            c = self._with_retries(req)
        except ProviderRejected as e:
            if e.status in REPEATING_STATUSES and gates.refused(key, e.words, probing=probing):
                raise RunRefused(e.words, run=run, status=e.status) from e
            raise
        except BaseException:
            gates.no_verdict(key, probing)
            raise
        gates.answered(key)
        return c

    def _tokens(self, c: Completion) -> Tokens:
        return Tokens(
            c.input_tokens,
            c.output_tokens,
            c.cache_write_tokens,
            c.cache_read_tokens,
            c.cache_write_1h_tokens,
        )

    def _account(self, c: Completion) -> None:
        c.cost_usd, c.input_cost_usd, c.cache_saved_usd = self.stats.answered(
            self._tokens(c), self.caps.prices, batched=c.batched
        )

    def _with_retries(self, req: Request) -> Completion:
        start = time.monotonic()
        policy = RetryPolicy(self.retry, budget=self.limiter is not None and self.slot is not None)
        est_in = req.estimated_input_tokens() if self.limiter is not None else 0
        last = ""
        while True:
            try:
                c = self._call(req, est_in, policy.deadline, policy.attempts)
            except ProviderError as e:
                last = f"{e.kind} ({e.status or '-'}): {e}"
                if e.kind == "fatal":
                    raise ProviderFatal(
                        f"{self.provider.name} {self.logical_model}: {e.cause} (HTTP {e.status}: {e})"
                    ) from e
                if e.kind == "rejected":
                    who = f"{self.provider.name} {self.logical_model} answered HTTP {e.status}" + (
                        f" ({e.param})" if e.param else ""
                    )
                    raise ProviderRejected(
                        f"{who}: {e}", status=e.status, words=f"{who}: {e.detail}" if e.detail else None
                    ) from e
                self.stats.rate_limited += e.kind == "rate_limited"
                retry = policy.after(e.kind, e.retry_after)
                if retry is None:
                    break
                self.stats.retries += 1
                if retry.pause is not None and self.limiter is not None and self.slot is not None:
                    self.limiter.pause(self.slot, retry.pause)  # acquire() then waits for it
                logger.debug(
                    "{} {} attempt {} failed ({}); retrying in {:.2f}s",
                    self.provider.name,
                    self.logical_model,
                    policy.attempts,
                    last,
                    retry.wait,
                )
                time.sleep(retry.wait)
                continue
            if c is None:  # the budget would not admit it before the deadline
                break
            c.attempts = policy.attempts + 1
            return c
        raise ProviderGaveUp(
            f"{self.provider.name} {self.logical_model}: gave up after "
            f"{time.monotonic() - start:.1f}s; last error {last or 'rate-limit wait too long'}"
        )

    def _call(self, req: Request, est_in: float, deadline: float, retries: int = 0) -> Completion | None:
        """One call inside the shared budget; its reservation is settled however the call ends (a time
        limit, a bug), never left counted as in flight. `retries`: how many came before (sent as the SDK's
        own retry count would be)."""
        token = retries_taken.set(retries)
        told = sim_trial.set(trial.get() if self.simulated else 1)
        try:
            return self._budgeted(req, est_in, deadline)
        finally:
            sim_trial.reset(told)
            retries_taken.reset(token)

    def _budgeted(self, req: Request, est_in: float, deadline: float) -> Completion | None:
        if self.limiter is None or self.slot is None:
            return self.provider.generate(req)
        out_est = min(req.max_output_tokens, self.limiter.out_estimate)
        with (
            self._spending(est_in, out_est) as spent,
            self.limiter.reserving(self.slot, est_in, out_est, deadline=deadline, run=self.run) as held,
        ):
            if held is None:
                return None
            c = self.provider.generate(req)
            held.used(budget_input_tokens(self.provider.name, self._tokens(c)), c.output_tokens)
            spent.append(
                (
                    cost(self.caps.prices, self._tokens(c))[0] or 0.0,
                    float(c.input_tokens + c.cache_read_tokens + c.cache_write_tokens + c.output_tokens),
                )
            )
        return c

    @contextmanager
    def _spending(self, est_in: float, out_est: float) -> Iterator[list[tuple[float, float]]]:
        """The call's expected cost held against the job's and its run's caps (runner/budget/spend.py) until
        it is answered; a call that would pass a cap is not sent: its run (or the job) stops there."""
        if self.spend is None:
            yield []
            return
        p = self.caps.prices
        usd = (est_in * p.input + out_est * p.output) / 1e6 if p is not None else 0.0
        try:
            ticket = self.spend.reserve(self.run_name, usd, est_in + out_est)
        except Spent as e:
            if self.gate is not None:
                self.gate[0].close(str(e), None if e.scope == JOB else e.scope)
            raise RunRefused(f"not sent: {e}", run=self.run_name or "", sent=False) from None
        with self.spend.held(ticket) as spent:
            yield spent

    def close(self) -> None:
        self.provider.close()


# How long a batch run's call may wait for its batch: the providers' 24 h window, and a margin.
BATCH_WAIT_SECONDS = 25 * 3600.0


def make_provider(
    ref: ModelRef,
    settings: ClientSettings,
    sim_url: str | None,
    *,
    via: str | None = None,
    via_token: str | None = None,
) -> tuple[Provider, str]:
    """The SDK client for ref, aimed at the real API or the simulator (or `via` a gateway of this run, which
    sends on to either: batch mode, presenting `via_token`); and the model name to send."""
    from runner.models.anthropic import AnthropicProvider
    from runner.models.openai import OpenAIProvider

    if ref.provider in CLOUDS:
        return _cloud_provider(ref, settings, sim_url, via=via, via_token=via_token), ref.model

    api = settings.provider(ref.provider)
    if settings.mode == "sim":
        if not sim_url:
            raise ConfigError("the simulator is not running")
        base = sdk_base_url(sim_url, ref.provider)
        key, model = "sim-key", ref.sim_model
        headers = {"x-sim-plays": ref.model}  # the simulator holds the request to this model's rules
    else:
        key_value = api_key(ref.provider)
        if not key_value:
            raise ConfigError(
                f"{API_KEY_ENV[ref.provider]} is not set (needed by {ref.provider} {ref.model})"
            )
        key, base, model = key_value, api.base_url or None, ref.model  # type: ignore[assignment]
        headers = {}
    timeout = api.timeout_seconds
    if via is not None:  # a batch can take up to its 24 h window: the call waits for it
        base, timeout = sdk_base_url(via, ref.provider), max(timeout, BATCH_WAIT_SECONDS)
        key = via_token or key
    cls: Any = AnthropicProvider if ref.provider == "anthropic" else OpenAIProvider
    return cls(
        key,
        base_url=base,
        timeout=timeout,
        headers=headers,
        lean=_lean(api.transport, settings.mode),
    ), model


def _cloud_provider(
    ref: ModelRef, settings: ClientSettings, sim_url: str | None, *, via: str | None, via_token: str | None
) -> Provider:
    """A cloud's SDK client for ref. On the simulator the cloud's own model id goes in the path, as on the
    cloud, and `x-sim-model` names the simulator model that answers it; stand-in credentials (SigV4 with a
    made-up key pair, a made-up Google token, a made-up Azure key). Through a gateway, the run's token is its
    credential (the gateway authenticates to the cloud itself). On the real cloud the SDK finds the
    credentials in the environment, as it would alone."""
    from runner.clouds import SIM_CREDENTIALS, AzureTarget, BedrockTarget, settings_over, target_of
    from runner.models.azure import AzureProvider
    from runner.models.bedrock import BedrockProvider
    from runner.models.vertex import VertexProvider

    mode = settings.mode
    if mode == "sim" and not sim_url:
        raise ConfigError("the simulator is not running")
    cloud = settings_over(settings.clouds[ref.provider], ref)
    t = target_of(cloud, ref, mode=mode, who=f"{ref.provider} {ref.model}")
    sim = mode == "sim" and via is None
    headers = {SIM_MODEL_HEADER: ref.sim_model} if mode == "sim" else {}
    root = via or (sim_url if mode == "sim" else None)
    base = sdk_base_url(root, ref.provider) if root else None
    timeout = max(t.timeout, BATCH_WAIT_SECONDS) if via is not None else t.timeout
    token = via_token if via is not None else None
    if isinstance(t, BedrockTarget):
        keys = (SIM_CREDENTIALS["aws_access_key"], SIM_CREDENTIALS["aws_secret_key"]) if sim else None
        return BedrockProvider(
            t, base_url=base, timeout=timeout, aws_keys=keys, api_key=token, headers=headers
        )
    if isinstance(t, AzureTarget):
        key = token or (SIM_CREDENTIALS["azure_key"] if sim else None)
        return AzureProvider(
            t,
            endpoint=base,
            timeout=timeout,
            api_key=key,
            headers=headers,
            lean=_lean(settings.openai.transport, mode),
        )
    env_token = environment().cloud.get(CLOUD_KEY_ENV["vertex"])  # else Application Default Credentials
    token = token or (SIM_CREDENTIALS["vertex_token"] if sim else env_token)
    return VertexProvider(t, base_url=base, timeout=timeout, access_token=token, headers=headers)


def _lean(transport: str, mode: str) -> bool:
    """The SDK's own request code on the real APIs; the lean wire where CPU binds (the simulator)."""
    return transport == "lean" or (transport == "auto" and mode == "sim")


def make_client(
    ref: ModelRef,
    settings: ClientSettings,
    *,
    sim_url: str | None,
    limiter: Budget | None,
    cache: ResponseCache | None,
) -> ModelClient:
    provider, wire_model = make_provider(ref, settings, sim_url)
    return client_over(provider, wire_model, ref, settings, limiter=limiter, cache=cache)


def client_over(
    provider: Provider,
    wire_model: str,
    ref: ModelRef,
    settings: ClientSettings,
    *,
    limiter: Budget | None,
    cache: ResponseCache | None,
    batch: bool = False,
    catalogue: Catalogue | None = None,
    gate: tuple[Gates, str] | None = None,
    run: str | None = None,
) -> ModelClient:
    """A client with its own counts over a provider (SDK client) that others may share; `batch`: its calls go
    through the run's gateway, which says of each answer whether a batch API gave it (billed at that price)
    or it went interactive. `catalogue`: what each model takes, its provider asked at the run's start
    (without one: the table and the config's overrides)."""
    slot = None
    if limiter is not None:
        k = budget_key(settings.rate_limits, ref.provider, ref.model)
        slot = limiter.slot(k) if k in limiter.keys else None
    caps = (catalogue or Catalogue()).of(ref.provider, ref.model, dict(settings.model_overrides))
    return ModelClient(
        provider,
        wire_model=wire_model,
        logical_model=ref.model,
        limiter=limiter,
        limiter_slot=slot,
        cache=cache,
        retry=settings.retry,
        caps=caps,
        prompt_cache=settings.prompt_cache,
        thinking=thinking_choice(ref),
        simulated=settings.mode == "sim",
        gate=gate,
        run=run,
    )
