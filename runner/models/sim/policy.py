"""The simulator's model: a deterministic policy that sees only what a real model sees.

Input: the system prompt, the messages (user text, its own earlier tool calls, tool results) and
the tool list. It parses the last request with the CRM request language, then re-derives its
plan by replaying the tool results it already has: search first, read results, resolve
ambiguous references by the user's qualifier, recover from a failed call. Same input, same output.

Named models:
  sim-strong   near-perfect
  sim-mini     realistic mistakes at seeded rates: wrong tool, wrong argument, skipped lookup
  sim-teacher  reviews a student's proposed step (see review())
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from runner.models.sim.language import STAGE_WORDS, parse, parse_amount, split_account_ref

PROPOSAL_MARKER = "STUDENT PROPOSAL:"


@dataclass(frozen=True)
class Profile:
    wrong_tool: float = 0.0
    wrong_arg: float = 0.0
    skip_lookup: float = 0.0


PROFILES = {
    "sim-strong": Profile(),
    "sim-teacher": Profile(),
    "sim-mini": Profile(wrong_tool=0.06, wrong_arg=0.12, skip_lookup=0.15),
}


@dataclass(frozen=True)
class Call:
    name: str
    args: dict[str, Any]

    def key(self) -> str:
        """The call as canonical JSON, once per object (a plan asks for it again and again)."""
        key = self.__dict__.get("_key")
        if key is None:  # a frozen dataclass: its __dict__ is the one place to keep it
            key = self.__dict__["_key"] = json.dumps([self.name, self.args], sort_keys=True)
        return key


@dataclass
class Action:
    """What the model answers: tool calls, or a final text."""

    text: str = ""
    calls: list[Call] = field(default_factory=list)


@dataclass
class Msg:
    """Provider-neutral message: role user|assistant|tool."""

    role: str
    text: str = ""
    calls: list[Call] = field(default_factory=list)
    call_ids: list[str] = field(default_factory=list)  # assistant: the id of each call
    call_id: str = ""  # tool: which call this result answers


class _Need(Exception):
    def __init__(self, calls: list[Call]) -> None:
        self.calls = calls


class _Final(Exception):
    def __init__(self, text: str) -> None:
        self.text = text


def _chance(*parts: str) -> float:
    h = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


_WRONG_TOOL = {
    "update_opportunity_stage": "update_opportunity",
    "create_case": "log_activity",
    "create_contact": "update_contact",
    "update_account": "update_contact",
    "log_activity": "create_case",
    "update_case_status": "update_opportunity_stage",
}
_ENUMS = {
    "priority": ["low", "medium", "high", "urgent"],
    "stage": list(STAGE_WORDS.values()),
    "type": ["prospect", "customer", "partner", "churned"],
    "kind": ["call", "meeting", "email", "note"],
    "status": ["resolved", "closed", "pending"],
}


def _mutate_args(args: dict[str, Any], roll: float) -> dict[str, Any]:
    """One plausible argument mistake: a neighbouring enum value, a dropped field, a slipped digit."""
    keys = sorted(k for k in args if not k.endswith("_id"))
    if not keys:
        return args
    k = keys[int(roll * 1000) % len(keys)]
    out = dict(args)
    v = out[k]
    if k in _ENUMS and isinstance(v, str):
        opts = [o for o in _ENUMS[k] if o != v]
        out[k] = opts[int(roll * 7919) % len(opts)]
    elif isinstance(v, int | float) and not isinstance(v, bool):
        out[k] = v * 10 if v else 1
    elif k in ("title", "email", "resolution"):
        del out[k]
    elif isinstance(v, str) and " " in v:
        out[k] = v.rsplit(" ", 1)[0]
    elif isinstance(v, list) and v and isinstance(v[0], dict) and "quantity" in v[0]:
        out[k] = [{**v[0], "quantity": v[0]["quantity"] + 1}, *v[1:]]
    return out


class Ctx:
    """Replays a plan against the calls already made in this turn."""

    def __init__(self, history: list[tuple[Call, dict[str, Any]]], profile: Profile, seed: str) -> None:
        self.done = {c.key(): r for c, r in history}
        self.history = history
        self.profile, self.seed = profile, seed

    def _choose(self, intended: Call) -> Call:
        p, k = self.profile, intended.key()
        if _chance(self.seed, "tool", k) < p.wrong_tool and intended.name in _WRONG_TOOL:
            return Call(_WRONG_TOOL[intended.name], intended.args)
        if _chance(self.seed, "arg", k) < p.wrong_arg:
            return Call(intended.name, _mutate_args(intended.args, _chance(self.seed, "which", k)))
        return intended

    def calls(self, intended: list[Call]) -> list[dict[str, Any]]:
        """Results of these calls; asks for all the missing ones at once (parallel tool calls)."""
        results, missing = [], []
        for c in intended:
            chosen = self._choose(c)
            r = self.done.get(c.key(), self.done.get(chosen.key()))
            if r is None:
                missing.append(chosen)
            results.append(r)
        if missing:
            raise _Need(missing)
        return results  # type: ignore[return-value]

    def call(self, tool: str, /, **args: Any) -> dict[str, Any]:
        return self.calls([Call(tool, {k: v for k, v in args.items() if v is not None})])[0]

    def account(self, ref: str) -> dict[str, Any]:
        base, city = split_account_ref(ref)
        search = Call("search_accounts", {"query": base})
        if search.key() not in self.done and _chance(self.seed, "skip", ref) < self.profile.skip_lookup:
            return {"id": 1, "name": base}  # guessed instead of looked up
        rows = _rows(self.call("search_accounts", query=base))
        if city:
            rows = [r for r in rows if str(r.get("billing_city", "")).casefold() == city.casefold()]
        exact = [r for r in rows if str(r.get("name", "")).casefold() == base.casefold()]
        rows = exact or rows
        if not rows:
            raise _Final(f"I could not find an account matching '{ref}'. Could you check the name?")
        if len(rows) > 1:
            where = ", ".join(f"{r['name']} ({r.get('billing_city')})" for r in rows)
            raise _Final(f"Several accounts match '{base}': {where}. Which one do you mean?")
        return rows[0]

    def one(self, tool: str, what: str, query: str, name_key: str, /) -> dict[str, Any]:
        rows = _rows(self.call(tool, query=query))
        exact = [r for r in rows if str(r.get(name_key, "")).casefold() == query.casefold()]
        rows = exact or rows
        if len(rows) != 1:
            raise _Final(f"I found {len(rows)} {what}s matching '{query}'. Which one do you mean?")
        return rows[0]


def _rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    if not result.get("ok"):
        return []
    return list(result.get("result", {}).get("results", []))


def _done(result: dict[str, Any], summary: str) -> str:
    if result.get("ok"):
        return summary
    err = result.get("error") or {}
    raise _Final(f"That did not work: {err.get('message', 'unknown error')}.")


def _plan(intent: str, s: dict[str, str], ctx: Ctx) -> str:
    """Run the plan for one request until it needs a call (raises _Need) or is done (returns text)."""
    if intent in ("add_contact", "add_two_contacts"):
        return _contacts(intent, s, ctx)
    if intent in ("new_opportunity", "new_case", "log_activity", "set_account_type", "set_revenue"):
        return _account_change(intent, s, ctx)
    if intent in ("move_stage", "lookup_stage", "create_quote"):
        return _opportunity(intent, s, ctx)
    if intent in ("resolve_case", "close_case_by_number"):
        return _case(intent, s, ctx)
    if intent == "new_account":
        r = ctx.call(
            "create_account",
            name=s["name"],
            industry=s["industry"].lower(),
            billing_city=s["city"],
            billing_country=s["country"],
        )
        return _done(r, f"Created the account {s['name']}.")
    if intent == "clarify":
        return "Happy to help - which record do you mean, and what exactly should change?"
    if intent == "refuse":
        return "I can't do that: it is destructive or would expose data, and no tool here allows it."
    return "Sorry, I did not understand the request."


def _contacts(intent: str, s: dict[str, str], ctx: Ctx) -> str:
    acct = ctx.account(s["account"])
    people = [(s["first"], s["last"], s["email"], s.get("title"))]
    if intent == "add_two_contacts":
        people.append((s["first2"], s["last2"], s["email2"], None))
    results = ctx.calls(
        [
            Call(
                "create_contact",
                {
                    k: v
                    for k, v in {
                        "account_id": acct["id"],
                        "first_name": f,
                        "last_name": ln,
                        "email": e,
                        "title": t,
                    }.items()
                    if v is not None
                },
            )
            for f, ln, e, t in people
        ]
    )
    for r in results:
        _done(r, "")
    return f"Added {len(results)} contact(s) at {acct['name']}."


def _account_change(intent: str, s: dict[str, str], ctx: Ctx) -> str:
    acct = ctx.account(s["account"])
    if intent == "new_opportunity":
        r = ctx.call(
            "create_opportunity",
            account_id=acct["id"],
            name=s["opp"],
            amount=parse_amount(s["amount"]),
            close_date=s["date"],
        )
    elif intent == "new_case":
        r = ctx.call(
            "create_case", account_id=acct["id"], subject=s["subject"], priority=s["priority"].lower()
        )
    elif intent == "log_activity":
        r = ctx.call(
            "log_activity",
            kind=s["kind"].lower(),
            subject=s["subject"],
            related_type="account",
            related_id=acct["id"],
        )
    elif intent == "set_account_type":
        r = ctx.call("update_account", account_id=acct["id"], type=s["type"].lower())
    else:
        r = ctx.call("update_account", account_id=acct["id"], annual_revenue=parse_amount(s["amount"]))
    return _done(r, f"Done: {intent.replace('_', ' ')} for {acct['name']}.")


def _opportunity(intent: str, s: dict[str, str], ctx: Ctx) -> str:
    opp = ctx.one("search_opportunities", "opportunitie", s["opp"], "name")
    if intent == "lookup_stage":
        return f"{opp['name']} is in stage {opp['stage']} ({opp.get('probability')}% probability)."
    if intent == "move_stage":
        stage = STAGE_WORDS[s["stage"].lower()]
        return _done(
            ctx.call("update_opportunity_stage", opportunity_id=opp["id"], stage=stage),
            f"Moved {opp['name']} to {stage}.",
        )
    product = ctx.one("search_products", "product", s["product"], "name")
    discount = parse_amount(s["discount"])
    line = {
        "sku": product["sku"],
        "quantity": int(s["qty"]),
        "discount_pct": int(discount) if discount.is_integer() else discount,
    }
    r = ctx.call("create_quote", opportunity_id=opp["id"], name=s["quote"], lines=[line])
    return _done(r, f"Created quote '{s['quote']}' on {opp['name']}.")


def _case(intent: str, s: dict[str, str], ctx: Ctx) -> str:
    status = "resolved" if intent == "resolve_case" else "closed"
    if intent == "close_case_by_number":
        first = ctx.call(
            "update_case_status", case_id=int(s["case_no"]), status=status, resolution=s["resolution"]
        )
        if first.get("ok"):
            return f"Closed case {s['case_no']}."
    case = ctx.one("search_cases", "case", s["subject"], "subject")
    r = ctx.call("update_case_status", case_id=case["id"], status=status, resolution=s["resolution"])
    return _done(r, f"Case {case['id']} ('{case['subject']}') is now {status}.")


def _turn_view(messages: list[Msg]) -> tuple[str, list[tuple[Call, dict[str, Any]]]]:
    """The last user request and the (call, result) pairs made since."""
    last_user = max((i for i, m in enumerate(messages) if m.role == "user" and m.text), default=-1)
    request = messages[last_user].text if last_user >= 0 else ""
    pending: dict[str, Call] = {}
    history: list[tuple[Call, dict[str, Any]]] = []
    for m in messages[last_user + 1 :]:
        if m.role == "assistant":
            pending.update(zip(m.call_ids, m.calls, strict=False))
        if m.role == "tool" and m.call_id in pending:
            try:
                result = json.loads(m.text)
            except json.JSONDecodeError:
                result = {"ok": False, "error": {"message": m.text}}
            history.append((pending.pop(m.call_id), result if isinstance(result, dict) else {"ok": False}))
    return request, history


def respond(model: str, messages: list[Msg], trial: int = 1) -> Action:
    """The model's next step for this conversation. `trial` > 1: another sample of the same conversation
    (a record's repeated trial, at a temperature above 0): its mistakes fall elsewhere, still at the
    profile's rates and still the same on every replay of that trial."""
    if model == "sim-teacher" and messages and PROPOSAL_MARKER in messages[-1].text:
        return review(messages)
    profile = PROFILES.get(model, PROFILES["sim-strong"])
    request, history = _turn_view(messages)
    parsed = parse(request)
    if parsed is None:
        return Action(text="Sorry, I did not understand the request. Could you rephrase it?")
    intent, slots = parsed
    ctx = Ctx(history, profile, seed=f"{model}\x1f{request}" + (f"\x1ftrial {trial}" if trial > 1 else ""))
    try:
        return Action(text=_plan(intent, slots, ctx))
    except _Need as need:
        return Action(calls=need.calls)
    except _Final as final:
        return Action(text=final.text)


def review(messages: list[Msg]) -> Action:
    """Teacher: compare the student's proposal with the strong policy's step on the same context."""
    # Providers that merge consecutive user messages put the request and the proposal in one text.
    before, raw = messages[-1].text.split(PROPOSAL_MARKER, 1)
    context = messages[:-1] + ([Msg("user", before.strip())] if before.strip() else [])
    try:
        proposal = json.loads(raw)
    except json.JSONDecodeError:
        proposal = {}
    proposed = [Call(c.get("name", ""), c.get("args", {})) for c in proposal.get("calls", [])]
    best = respond("sim-strong", context)
    same = [c.key() for c in proposed] == [c.key() for c in best.calls]
    if same:
        verdict: dict[str, Any] = {"verdict": "approve"}
    elif best.calls:
        verdict = {
            "verdict": "revise",
            "guidance": _guidance(proposed, best.calls),
            "calls": [{"name": c.name, "args": c.args} for c in best.calls],
        }
    else:
        verdict = {
            "verdict": "revise",
            "guidance": "No further tool call is needed; answer the user.",
            "text": best.text,
        }
    return Action(text=json.dumps(verdict, sort_keys=True))


def _guidance(proposed: list[Call], best: list[Call]) -> str:
    if not proposed:
        return f"Do not stop yet: call {best[0].name} first."
    if proposed[0].name != best[0].name:
        if best[0].name.startswith("search_"):
            return f"Look the record up with {best[0].name} before acting on it."
        return f"Use {best[0].name}, not {proposed[0].name}, for this step."
    diff = sorted(
        k for k in set(proposed[0].args) | set(best[0].args) if proposed[0].args.get(k) != best[0].args.get(k)
    )
    return f"Check the arguments of {best[0].name}: {', '.join(diff)} should follow the user's request."
