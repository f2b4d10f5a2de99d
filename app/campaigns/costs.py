"""What a campaign costs: Meta's price per message by pricing category and recipient country,
from the rate card `SWITCHBOARD_MESSAGE_RATE_CARD` (docs/api.md "Meta's limits and ratings").

The card (read by app/kit/rate_card.py) is JSON: `{"currency": "USD", "rates":
{"marketing": {"US": 0.025, "*": 0.05}, "utility": {"*": 0.004}}}`: per category (Meta's
lower-case words: marketing, utility, authentication, service), a price per ISO country and
`*` for the others. A category or country the card does not price costs 0. A recipient's
country is the main region of the number's calling code (+1 is US, +44 GB, +351 PT).

- Estimated cost: every recipient (the audience as it stands, for a draft) at the price of
  the template's category. Before launch it is the figure to approve; after, it stays the
  ceiling of what the campaign can cost.
- Cost so far: the messages Meta priced as billable (`statuses[].pricing`), each at the price
  of the category Meta gave it. Deferred and failed messages that Meta did not bill cost 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.access.subject import Subject
from app.campaigns.models import CampaignRecipient, CampaignStatus
from app.campaigns.repository import CampaignRepository
from app.config import Settings
from app.kit.rate_card import PREFIX_LENGTH, country_of, rate_card
from app.templates.repository import TemplateRepository


@dataclass(frozen=True, slots=True)
class CampaignCost:
    currency: str
    category: str | None
    recipients: int
    estimated_cost: float
    billable_messages: int
    cost_so_far: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "currency": self.currency,
            "category": self.category,
            "recipients": self.recipients,
            "estimated_cost": self.estimated_cost,
            "billable_messages": self.billable_messages,
            "cost_so_far": self.cost_so_far,
        }


def _money(value: float) -> float:
    return round(value, 6)


async def campaign_cost(
    session: AsyncSession, subject: Subject, campaign_id: str, settings: Settings
) -> CampaignCost:
    """The campaign's estimated cost and cost so far (NotFound for another organization's)."""
    repository = CampaignRepository(session, subject)
    campaign = await repository.get_or_404(campaign_id)
    card = rate_card(settings.message_rate_card)
    template = (
        await TemplateRepository(session, subject).get(campaign.message_template_id)
        if campaign.message_template_id
        else None
    )
    category = template.category.lower() if template is not None else None
    recipients = 0
    estimated = spent = 0.0
    billable = 0
    if campaign.status == CampaignStatus.DRAFT:
        for prefix, count in await repository.audience_prefixes(campaign, PREFIX_LENGTH):
            recipients += count
            estimated += count * card.rate(category, country_of(prefix))
    else:
        prefix_of = func.substr(CampaignRecipient.phone_number, 1, PREFIX_LENGTH)
        rows = await session.execute(
            select(
                prefix_of,
                CampaignRecipient.pricing_category,
                CampaignRecipient.billable,
                func.count(),
            )
            .where(CampaignRecipient.campaign_id == campaign.id)
            .group_by(prefix_of, CampaignRecipient.pricing_category, CampaignRecipient.billable)
        )
        for prefix, priced_as, billed, count in rows:
            country = country_of(str(prefix or ""))
            recipients += count
            estimated += count * card.rate(category, country)
            if billed:
                billable += count
                spent += count * card.rate(priced_as, country)
    return CampaignCost(
        card.currency, category, recipients, _money(estimated), billable, _money(spent)
    )
