"""The CRM tools' arguments: one pydantic model per tool (its JSON Schema is generated from it).

extra="forbid": an argument the tool does not know is an error the model sees, not silently dropped.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Industry = Literal[
    "software",
    "manufacturing",
    "healthcare",
    "finance",
    "retail",
    "education",
    "energy",
    "logistics",
    "media",
    "other",
]
AccountType = Literal["prospect", "customer", "partner", "churned"]
Stage = Literal["prospecting", "qualification", "proposal", "negotiation", "closed_won", "closed_lost"]
Priority = Literal["low", "medium", "high", "urgent"]
CaseStatus = Literal["new", "open", "pending", "resolved", "closed"]
ActivityKind = Literal["call", "email", "meeting", "note", "task"]
RelatedType = Literal["account", "contact", "opportunity", "case", "quote"]
STAGE_PROBABILITY = {
    "prospecting": 10,
    "qualification": 25,
    "proposal": 50,
    "negotiation": 75,
    "closed_won": 100,
    "closed_lost": 0,
}
Id = Field(gt=0, lt=2**62)


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


# ---------------------------------------------------------------- argument models
class SearchAccounts(Args):
    query: str | None = Field(None, description="Part of the account name, case-insensitive")
    industry: Industry | None = None
    type: AccountType | None = None
    city: str | None = Field(None, description="Billing city")
    limit: int = Field(10, ge=1, le=50)


class GetAccount(Args):
    account_id: int = Id


class CreateAccount(Args):
    name: str = Field(min_length=1, max_length=200)
    industry: Industry
    type: AccountType = "prospect"
    annual_revenue: Decimal | None = Field(None, ge=0)
    employees: int | None = Field(None, ge=0)
    website: str | None = None
    billing_city: str | None = None
    billing_country: str | None = None
    owner_email: str | None = Field(None, description="Email of the sales user who owns the account")


class UpdateAccount(Args):
    account_id: int = Id
    type: AccountType | None = None
    industry: Industry | None = None
    annual_revenue: Decimal | None = Field(None, ge=0)
    employees: int | None = Field(None, ge=0)
    website: str | None = None
    billing_city: str | None = None
    billing_country: str | None = None
    owner_email: str | None = None


class SearchContacts(Args):
    query: str | None = Field(None, description="Part of first name, last name or full name")
    account_id: int | None = Field(None, gt=0)
    email: str | None = None
    limit: int = Field(10, ge=1, le=50)


class CreateContact(Args):
    account_id: int = Id
    first_name: str = Field(min_length=1, max_length=100)
    last_name: str = Field(min_length=1, max_length=100)
    email: str | None = None
    phone: str | None = None
    title: str | None = None


class UpdateContact(Args):
    contact_id: int = Id
    email: str | None = None
    phone: str | None = None
    title: str | None = None


class SearchOpportunities(Args):
    account_id: int | None = Field(None, gt=0)
    stage: Stage | None = None
    query: str | None = Field(None, description="Part of the opportunity name")
    limit: int = Field(10, ge=1, le=50)


class CreateOpportunity(Args):
    account_id: int = Id
    name: str = Field(min_length=1, max_length=200)
    amount: Decimal = Field(ge=0)
    close_date: dt.date
    stage: Stage = "prospecting"
    probability: int | None = Field(None, ge=0, le=100, description="Defaults from the stage")


class UpdateOpportunityStage(Args):
    opportunity_id: int = Id
    stage: Stage
    probability: int | None = Field(None, ge=0, le=100, description="Defaults from the stage")


class UpdateOpportunity(Args):
    opportunity_id: int = Id
    name: str | None = Field(None, min_length=1, max_length=200)
    amount: Decimal | None = Field(None, ge=0)
    close_date: dt.date | None = None


class SearchProducts(Args):
    query: str | None = Field(None, description="Part of the product name or SKU")


class QuoteLine(Args):
    sku: str = Field(description="Product SKU, e.g. CRM-PRO")
    quantity: int = Field(gt=0, le=100000)
    discount_pct: Decimal = Field(Decimal(0), ge=0, le=100)


class CreateQuote(Args):
    opportunity_id: int = Id
    name: str = Field(min_length=1, max_length=200)
    valid_until: dt.date | None = None
    lines: list[QuoteLine] = Field(min_length=1, max_length=50)


class CreateCase(Args):
    account_id: int = Id
    subject: str = Field(min_length=1, max_length=300)
    priority: Priority = "medium"
    contact_id: int | None = Field(None, gt=0)
    description: str | None = None


class SearchCases(Args):
    account_id: int | None = Field(None, gt=0)
    status: CaseStatus | None = None
    priority: Priority | None = None
    query: str | None = Field(None, description="Part of the subject")
    limit: int = Field(10, ge=1, le=50)


class UpdateCaseStatus(Args):
    case_id: int = Id
    status: CaseStatus
    resolution: str | None = Field(None, description="How it was resolved (for resolved/closed)")


class LogActivity(Args):
    kind: ActivityKind
    subject: str = Field(min_length=1, max_length=300)
    related_type: RelatedType
    related_id: int = Id
    body: str | None = None
    due_date: dt.date | None = None
    done: bool = False
