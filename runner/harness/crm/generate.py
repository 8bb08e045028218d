"""Deterministic generator of CRM conversations (`runner dataset generate`).

Each conversation gets its own small world (accounts, contacts, deals, cases; sometimes two
accounts with the same leading name in different cities) and 1-6 turns drawn from the request
language: lookups before writes, several records in one request, ambiguous references, requests
to refuse or clarify, and a first call that fails and must be recovered from.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from runner.harness.crm.dataset import Conversation, GoldCall, Turn
from runner.harness.crm.tool_args import STAGE_PROBABILITY
from runner.models.sim.language import INTENTS, STAGE_WORDS, render

FIRST = [
    "Ava",
    "Liam",
    "Noah",
    "Mia",
    "Elena",
    "Kofi",
    "Sara",
    "Jonas",
    "Yuki",
    "Omar",
    "Lena",
    "Raj",
    "Chloe",
    "Mateo",
    "Ines",
    "Hugo",
    "Nadia",
    "Felix",
    "Zoe",
    "Tariq",
    "Ingrid",
    "Pablo",
    "Mei",
    "Oscar",
]
LAST = [
    "Hartley",
    "Okafor",
    "Lindqvist",
    "Moreau",
    "Castillo",
    "Brennan",
    "Sato",
    "Haddad",
    "Kowalski",
    "Ferreira",
    "Novak",
    "Ibrahim",
    "Schulz",
    "Patel",
    "Duarte",
    "Larsen",
    "Quinn",
    "Adeyemi",
    "Rossi",
]
TITLES = ["CTO", "VP Sales", "Head of IT", "Procurement Lead", "CFO", "Operations Manager", "Data Architect"]
COMPANY_A = [
    "Northwind",
    "Bluepeak",
    "Cedar",
    "Ironclad",
    "Lumen",
    "Vertex",
    "Harbor",
    "Summit",
    "Orchid",
    "Granite",
    "Nimbus",
    "Aurora",
    "Falcon",
    "Keystone",
    "Meridian",
    "Pioneer",
    "Redwood",
    "Sterling",
]
COMPANY_B = [
    "Traders",
    "Logistics",
    "Health",
    "Analytics",
    "Foods",
    "Energy",
    "Media",
    "Systems",
    "Capital",
    "Robotics",
    "Learning",
    "Retail Group",
    "Labs",
    "Manufacturing",
]
INDUSTRY_OF = {
    "Traders": "retail",
    "Logistics": "logistics",
    "Health": "healthcare",
    "Analytics": "software",
    "Foods": "retail",
    "Energy": "energy",
    "Media": "media",
    "Systems": "software",
    "Capital": "finance",
    "Robotics": "manufacturing",
    "Learning": "education",
    "Retail Group": "retail",
    "Labs": "software",
    "Manufacturing": "manufacturing",
}
CITIES = [
    ("Oslo", "Norway"),
    ("Berlin", "Germany"),
    ("Lyon", "France"),
    ("Austin", "USA"),
    ("Osaka", "Japan"),
    ("Lagos", "Nigeria"),
    ("Porto", "Portugal"),
    ("Denver", "USA"),
    ("Gdansk", "Poland"),
    ("Leeds", "UK"),
]
DEAL = [
    "Platform Renewal",
    "Expansion",
    "Pilot",
    "Data Migration",
    "Support Upgrade",
    "Analytics Rollout",
    "Seat Increase",
    "Integration Project",
    "Q3 Upsell",
    "Multi-year Deal",
]
SUBJECTS = [
    "login failures after SSO change",
    "invoice shows wrong VAT",
    "export to CSV times out",
    "dashboard not loading",
    "API rate limit errors",
    "duplicate contacts after import",
    "email sync stopped",
    "report totals do not match",
    "mobile app crashes on start",
]
RESOLUTIONS = [
    "fixed in release 4.2",
    "customer confirmed it works",
    "config corrected",
    "duplicate of another case",
]
PRODUCTS = [
    ("CRM-PRO", "CRM Professional Seat"),
    ("CRM-ENT", "CRM Enterprise Seat"),
    ("ANL-PRO", "Analytics Pro"),
    ("SUP-PRM", "Premium Support"),
    ("TRN-DAY", "Training Day"),
    ("INT-API", "API Integration Add-on"),
]
ACTIVITY_SUBJECTS = [
    "renewal timeline",
    "pricing questions",
    "security review",
    "onboarding plan",
    "quarterly business review",
]


@dataclass
class World:
    rng: random.Random
    accounts: list[dict[str, Any]] = field(default_factory=list)
    contacts: list[dict[str, Any]] = field(default_factory=list)
    opps: list[dict[str, Any]] = field(default_factory=list)
    cases: list[dict[str, Any]] = field(default_factory=list)
    next_id: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("accounts", "contacts", "opportunities", "quotes", "cases", "activities"), 1001
        )
    )
    emails: set[str] = field(default_factory=set)
    ambiguous: str | None = None  # leading name shared by two accounts

    def new_id(self, table: str) -> int:
        self.next_id[table] += 1
        return self.next_id[table] - 1

    def person(self) -> tuple[str, str, str]:
        while True:
            f, ln = self.rng.choice(FIRST), self.rng.choice(LAST)
            email = f"{f}.{ln}@{self.rng.choice(['acme.io', 'mail.com', 'corp.net', 'example.org'])}".lower()
            if email not in self.emails:
                self.emails.add(email)
                return f, ln, email

    def account_ref(self) -> tuple[dict[str, Any], str, str]:
        """An account, the words a user would use for it, and the search query those words give."""
        acct = self.rng.choice(self.accounts)
        if self.ambiguous and acct["name"].startswith(self.ambiguous + " "):
            return acct, f"{self.ambiguous} (the one in {acct['billing_city']})", self.ambiguous
        return acct, acct["name"], acct["name"]


def _build_world(rng: random.Random) -> World:
    w = World(rng)
    firsts = rng.sample(COMPANY_A, 4)
    n_accounts = rng.randint(2, 4)
    names = [(firsts[i], rng.choice(COMPANY_B)) for i in range(n_accounts)]
    if rng.random() < 0.35:  # two accounts sharing a leading name: references need a qualifier
        w.ambiguous = firsts[0]
        other = rng.choice([b for b in COMPANY_B if b != names[0][1]])
        names.append((firsts[0], other))
    cities = rng.sample(CITIES, len(names))
    for i, ((a, b), (city, country)) in enumerate(zip(names, cities, strict=True), 1):
        w.accounts.append(
            {
                "id": i,
                "name": f"{a} {b}",
                "industry": INDUSTRY_OF[b],
                "type": rng.choice(["prospect", "customer", "customer", "partner"]),
                "annual_revenue": rng.randrange(1, 500) * 100000,
                "employees": rng.randrange(20, 5000),
                "billing_city": city,
                "billing_country": country,
                "owner_id": rng.randint(1, 4),
            }
        )
    deals = rng.sample(DEAL, len(DEAL))
    subjects = rng.sample(SUBJECTS, len(SUBJECTS))
    for acct in w.accounts:
        for _ in range(rng.randint(1, 2)):
            f, ln, email = w.person()
            w.contacts.append(
                {
                    "id": len(w.contacts) + 1,
                    "account_id": acct["id"],
                    "first_name": f,
                    "last_name": ln,
                    "email": email,
                    "title": rng.choice(TITLES),
                }
            )
        for _ in range(rng.randint(0, 2)):
            if not deals:
                break
            stage = rng.choice(["prospecting", "qualification", "proposal", "negotiation"])
            w.opps.append(
                {
                    "id": len(w.opps) + 1,
                    "account_id": acct["id"],
                    "name": f"{acct['name'].split()[0]} {deals.pop()}",
                    "stage": stage,
                    "amount": rng.randrange(5, 400) * 1000,
                    "close_date": f"2026-{rng.randint(1, 12):02d}-28",
                    "probability": STAGE_PROBABILITY[stage],
                    "owner_id": acct["owner_id"],
                }
            )
        if rng.random() < 0.6 and subjects:
            w.cases.append(
                {
                    "id": len(w.cases) + 1,
                    "account_id": acct["id"],
                    "subject": subjects.pop(),
                    "priority": rng.choice(["low", "medium", "high"]),
                    "status": "open",
                }
            )
    return w


def _call(tool: str, expect_error: bool = False, **args: Any) -> GoldCall:
    return GoldCall(tool=tool, args=args, expect_error=expect_error)


Rendered = tuple[str, list[GoldCall]] | None
ACCOUNT_INTENTS = (
    "add_contact",
    "add_two_contacts",
    "new_opportunity",
    "new_case",
    "log_activity",
    "set_account_type",
    "set_revenue",
)


def _turn(w: World, intent: str) -> Rendered:
    """Render one request and its gold calls, updating the world; None if the world can't support it."""
    v = w.rng.randrange(8)
    if intent in ACCOUNT_INTENTS:
        return _account_turn(w, intent, v)
    if intent == "new_account":
        return _new_account(w, v)
    if intent in ("move_stage", "lookup_stage", "create_quote"):
        return _opportunity_turn(w, intent, v)
    if intent in ("resolve_case", "close_case_by_number"):
        return _case_turn(w, intent, v)
    if intent in ("clarify", "refuse"):
        return render(intent, v, dict(city=w.rng.choice(CITIES)[0])), []
    raise ValueError(f"unknown intent {intent}")


def _account_turn(w: World, intent: str, v: int) -> Rendered:
    """Requests about an account the user names: a lookup first, then the change."""
    rng = w.rng
    acct, ref, query = w.account_ref()
    lookup = _call("search_accounts", query=query)
    aid = acct["id"]
    if intent == "add_contact":
        f, ln, email = w.person()
        title = rng.choice(TITLES)
        w.contacts.append({"id": w.new_id("contacts"), "account_id": aid})
        return render(intent, v, dict(first=f, last=ln, email=email, title=title, account=ref)), [
            lookup,
            _call("create_contact", account_id=aid, first_name=f, last_name=ln, email=email, title=title),
        ]
    if intent == "add_two_contacts":
        (f, ln, e), (f2, l2, e2) = w.person(), w.person()
        w.new_id("contacts"), w.new_id("contacts")
        return render(
            intent, v, dict(first=f, last=ln, email=e, first2=f2, last2=l2, email2=e2, account=ref)
        ), [
            lookup,
            _call("create_contact", account_id=aid, first_name=f, last_name=ln, email=e),
            _call("create_contact", account_id=aid, first_name=f2, last_name=l2, email=e2),
        ]
    if intent == "new_opportunity":
        name = f"{acct['name'].split()[0]} {rng.choice(DEAL)} {rng.randint(2026, 2027)}"
        if any(o["name"] == name for o in w.opps):
            return None
        amount, date = rng.randrange(10, 900) * 500, f"2027-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        w.opps.append({"id": w.new_id("opportunities"), "name": name, "stage": "prospecting"})
        return render(intent, v, dict(opp=name, account=ref, amount=f"{amount:,}", date=date)), [
            lookup,
            _call("create_opportunity", account_id=aid, name=name, amount=amount, close_date=date),
        ]
    if intent == "new_case":
        subject = rng.choice(SUBJECTS)
        if any(c["subject"] == subject for c in w.cases):
            return None
        priority = rng.choice(["low", "medium", "high", "urgent"])
        w.cases.append({"id": w.new_id("cases"), "subject": subject, "status": "new"})
        return render(intent, v, dict(account=ref, subject=subject, priority=priority)), [
            lookup,
            _call("create_case", account_id=aid, subject=subject, priority=priority),
        ]
    if intent == "log_activity":
        kind, subject = rng.choice(["call", "meeting", "email", "note"]), rng.choice(ACTIVITY_SUBJECTS)
        w.new_id("activities")
        return render(intent, v, dict(kind=kind, account=ref, subject=subject)), [
            lookup,
            _call("log_activity", kind=kind, subject=subject, related_type="account", related_id=aid),
        ]
    if intent == "set_account_type":
        new = rng.choice([t for t in ("prospect", "customer", "partner", "churned") if t != acct["type"]])
        acct["type"] = new
        return render(intent, v, dict(account=ref, type=new)), [
            lookup,
            _call("update_account", account_id=aid, type=new),
        ]
    assert intent == "set_revenue", intent
    amount = rng.randrange(1, 900) * 100000
    return render(intent, v, dict(account=ref, amount=f"{amount:,}")), [
        lookup,
        _call("update_account", account_id=aid, annual_revenue=amount),
    ]


def _new_account(w: World, v: int) -> Rendered:
    rng = w.rng
    intent = "new_account"
    name = f"{rng.choice(COMPANY_A)} {rng.choice(COMPANY_B)}"
    if any(a["name"].split()[0] == name.split()[0] for a in w.accounts):
        return None
    city, country = rng.choice(CITIES)
    industry = INDUSTRY_OF[name.split(" ", 1)[1]]
    w.accounts.append({"id": w.new_id("accounts"), "name": name, "billing_city": city, "type": "prospect"})
    return render(intent, v, dict(name=name, industry=industry, city=city, country=country)), [
        _call("create_account", name=name, industry=industry, billing_city=city, billing_country=country)
    ]


def _opportunity_turn(w: World, intent: str, v: int) -> Rendered:
    rng = w.rng
    if not w.opps:
        return None
    opp = rng.choice(w.opps)
    lookup = _call("search_opportunities", query=opp["name"])
    if intent == "lookup_stage":
        return render(intent, v, dict(opp=opp["name"])), [lookup]
    if intent == "move_stage":
        stage_word = rng.choice([s for s, k in STAGE_WORDS.items() if k != opp["stage"]])
        opp["stage"] = STAGE_WORDS[stage_word]
        return render(intent, v, dict(opp=opp["name"], stage=stage_word)), [
            lookup,
            _call("update_opportunity_stage", opportunity_id=opp["id"], stage=STAGE_WORDS[stage_word]),
        ]
    sku, product = rng.choice(PRODUCTS)
    qty, discount = rng.randint(1, 200), rng.choice([0, 5, 10, 15, 20])
    qname = f"{opp['name']} Q{rng.randint(1, 9)}"
    w.new_id("quotes")
    return render(
        intent, v, dict(quote=qname, opp=opp["name"], qty=str(qty), product=product, discount=str(discount))
    ), [
        lookup,
        _call("search_products", query=product),
        _call(
            "create_quote",
            opportunity_id=opp["id"],
            name=qname,
            lines=[{"sku": sku, "quantity": qty, "discount_pct": discount}],
        ),
    ]


def _case_turn(w: World, intent: str, v: int) -> Rendered:
    rng = w.rng
    open_cases = [c for c in w.cases if c["status"] in ("new", "open")]
    if not open_cases:
        return None
    case = rng.choice(open_cases)
    resolution = rng.choice(RESOLUTIONS)
    search = _call("search_cases", query=case["subject"])
    if intent == "resolve_case":
        case["status"] = "resolved"
        return render(intent, v, dict(subject=case["subject"], resolution=resolution)), [
            search,
            _call("update_case_status", case_id=case["id"], status="resolved", resolution=resolution),
        ]
    case["status"] = "closed"
    wrong = rng.randint(5000, 9999)  # the user misremembers the number: the first call fails
    return render(intent, v, dict(case_no=str(wrong), subject=case["subject"], resolution=resolution)), [
        _call("update_case_status", expect_error=True, case_id=wrong, status="closed", resolution=resolution),
        search,
        _call("update_case_status", case_id=case["id"], status="closed", resolution=resolution),
    ]


_WEIGHTS = {
    "add_contact": 10,
    "add_two_contacts": 4,
    "move_stage": 9,
    "new_opportunity": 7,
    "new_case": 7,
    "resolve_case": 5,
    "close_case_by_number": 4,
    "log_activity": 7,
    "create_quote": 6,
    "set_account_type": 5,
    "set_revenue": 4,
    "new_account": 4,
    "lookup_stage": 5,
    "clarify": 4,
    "refuse": 3,
}
assert set(_WEIGHTS) == set(INTENTS)
_HARD = {"close_case_by_number", "create_quote", "add_two_contacts"}


def generate_one(seed: int, index: int) -> Conversation:
    rng = random.Random(f"{seed}:{index}")
    w = _build_world(rng)
    seed_rows = {
        "accounts": [dict(a) for a in w.accounts],
        "contacts": [dict(c) for c in w.contacts],
        "opportunities": [dict(o) for o in w.opps],
        "cases": [dict(c) for c in w.cases],
    }
    n_turns = rng.choices([1, 2, 3, 4, 5, 6], weights=[25, 25, 20, 14, 9, 7])[0]
    turns: list[Turn] = []
    tags: set[str] = set()
    names, weights = list(_WEIGHTS), list(_WEIGHTS.values())
    while len(turns) < n_turns:
        intent = rng.choices(names, weights=weights)[0]
        made = _turn(w, intent)
        if made is None:
            continue
        text, calls = made
        expect = intent if intent in ("clarify", "refuse") else "tools"
        turns.append(Turn(user=text, expect=expect, gold_calls=calls))
        tags.add(intent)
        if "(the one in " in text:
            tags.add("ambiguous_reference")
    hard = bool(tags & _HARD) or "ambiguous_reference" in tags
    difficulty = "hard" if hard and n_turns >= 3 else "medium" if hard or n_turns >= 3 else "easy"
    return Conversation(
        id=f"crm-{seed}-{index:05d}",
        description=f"{n_turns}-turn CRM session: " + ", ".join(sorted(tags)),
        tags=sorted(tags),
        difficulty=difficulty,
        seed=seed_rows,
        turns=turns,
    )


def generate(n: int, seed: int = 7) -> list[Conversation]:
    return [generate_one(seed, i) for i in range(n)]
