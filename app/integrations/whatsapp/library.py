"""The simulator's copy of Meta's template library: pre-written templates to start from.

Entries have Meta's `message_template_library` shape. Filters match as the platform's do:
`search` is a keyword looked up in the name, body, topic, use case and industry; `topic`,
`usecase`, `industry` and `language` match exactly (case-insensitive); `name` is exact.
"""

from __future__ import annotations

from typing import Any

from app.integrations.whatsapp.types import LibraryFilters


def _entry(
    number: int,
    name: str,
    language: str,
    category: str,
    topic: str,
    usecase: str,
    industry: str,
    body: str,
    body_params: list[str],
    *,
    header: str | None = None,
    buttons: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    return {
        "id": f"{7_300_000_000_000_000 + number}",
        "name": name,
        "language": language,
        "category": category,
        "topic": topic,
        "usecase": usecase,
        "industry": industry,
        "header": {"format": "TEXT", "text": header} if header else None,
        "body": body,
        "body_params": body_params,
        "buttons": buttons or [],
    }


_TRACK = [{"type": "URL", "text": "Track package", "url": "https://example.com/track/{{1}}"}]
_MANAGE = [{"type": "URL", "text": "Manage booking", "url": "https://example.com/booking/{{1}}"}]
_REPLY_YES_NO = [{"type": "QUICK_REPLY", "text": "Yes"}, {"type": "QUICK_REPLY", "text": "No"}]

CATALOG: tuple[dict[str, Any], ...] = (
    _entry(
        1,
        "order_confirmation",
        "en_US",
        "UTILITY",
        "Order management",
        "Order confirmation",
        "E-commerce",
        "Hi {{1}}, thank you for your order {{2}}! We will let you know when it ships.",
        ["customer_name", "order_number"],
        header="Order confirmed",
    ),
    _entry(
        2,
        "shipment_confirmation",
        "en_US",
        "UTILITY",
        "Order management",
        "Shipping update",
        "E-commerce",
        "Good news {{1}}! Your order {{2}} is on its way and should arrive by {{3}}.",
        ["customer_name", "order_number", "delivery_date"],
        buttons=_TRACK,
    ),
    _entry(
        3,
        "delivery_confirmation",
        "en_US",
        "UTILITY",
        "Order management",
        "Delivery update",
        "E-commerce",
        "Your package for order {{1}} was delivered. Enjoy!",
        ["order_number"],
    ),
    _entry(
        4,
        "order_delayed",
        "en_US",
        "UTILITY",
        "Order management",
        "Shipping update",
        "E-commerce",
        "Sorry {{1}}, order {{2}} is delayed. The new delivery date is {{3}}.",
        ["customer_name", "order_number", "delivery_date"],
        buttons=_TRACK,
    ),
    _entry(
        5,
        "payment_reminder",
        "en_US",
        "UTILITY",
        "Payments",
        "Payment reminder",
        "Financial services",
        "Hi {{1}}, a payment of {{2}} is due on {{3}}.",
        ["customer_name", "amount", "due_date"],
    ),
    _entry(
        6,
        "payment_received",
        "en_US",
        "UTILITY",
        "Payments",
        "Payment confirmation",
        "Financial services",
        "We received your payment of {{1}}. Thank you, {{2}}!",
        ["amount", "customer_name"],
    ),
    _entry(
        7,
        "payment_failed",
        "en_US",
        "UTILITY",
        "Payments",
        "Payment issue",
        "Financial services",
        "Your payment of {{1}} could not be processed. Please update your payment method.",
        ["amount"],
    ),
    _entry(
        8,
        "appointment_reminder",
        "en_US",
        "UTILITY",
        "Appointments",
        "Appointment reminder",
        "Healthcare",
        "Hi {{1}}, this is a reminder of your appointment on {{2}} at {{3}}.",
        ["patient_name", "date", "time"],
        buttons=_REPLY_YES_NO,
    ),
    _entry(
        9,
        "appointment_confirmation",
        "en_US",
        "UTILITY",
        "Appointments",
        "Appointment confirmation",
        "Healthcare",
        "Your appointment with {{1}} is confirmed for {{2}}.",
        ["provider_name", "date"],
    ),
    _entry(
        10,
        "reservation_confirmation",
        "en_US",
        "UTILITY",
        "Appointments",
        "Booking confirmation",
        "Travel and hospitality",
        "Hi {{1}}, your reservation {{2}} for {{3}} is confirmed.",
        ["guest_name", "reservation_code", "date"],
        buttons=_MANAGE,
    ),
    _entry(
        11,
        "account_update",
        "en_US",
        "UTILITY",
        "Account updates",
        "Account change",
        "Technology",
        "Hi {{1}}, the email address on your account was changed. If this was not you, contact us.",
        ["customer_name"],
    ),
    _entry(
        12,
        "recordatorio_de_cita",
        "es_ES",
        "UTILITY",
        "Appointments",
        "Appointment reminder",
        "Healthcare",
        "Hola {{1}}, le recordamos su cita el {{2}} a las {{3}}.",
        ["patient_name", "date", "time"],
    ),
    _entry(
        13,
        "confirmacao_de_pedido",
        "pt_BR",
        "UTILITY",
        "Order management",
        "Order confirmation",
        "E-commerce",
        "Olá {{1}}, recebemos o seu pedido {{2}}. Obrigado!",
        ["customer_name", "order_number"],
    ),
    _entry(
        14,
        "welcome_offer",
        "en_US",
        "MARKETING",
        "Promotions",
        "Welcome offer",
        "Retail",
        "Welcome, {{1}}! Enjoy {{2}} off your first purchase with code {{3}}.",
        ["customer_name", "discount", "code"],
        header="A gift for you",
    ),
    _entry(
        15,
        "seasonal_sale",
        "en_US",
        "MARKETING",
        "Promotions",
        "Sale announcement",
        "Retail",
        "Our {{1}} sale starts today: up to {{2}} off storewide.",
        ["season", "discount"],
        buttons=[{"type": "URL", "text": "Shop now", "url": "https://example.com/sale"}],
    ),
    _entry(
        16,
        "abandoned_cart",
        "en_US",
        "MARKETING",
        "Promotions",
        "Cart reminder",
        "E-commerce",
        "Hi {{1}}, you left items in your cart. Complete your order before they sell out!",
        ["customer_name"],
        buttons=[{"type": "URL", "text": "View cart", "url": "https://example.com/cart"}],
    ),
    _entry(
        17,
        "new_arrivals",
        "en_US",
        "MARKETING",
        "Product announcements",
        "New product",
        "Retail",
        "New in: {{1}}. Be among the first to try it, {{2}}.",
        ["product_name", "customer_name"],
    ),
    _entry(
        18,
        "loyalty_points",
        "en_US",
        "MARKETING",
        "Loyalty",
        "Points balance",
        "Retail",
        "Hi {{1}}, you have {{2}} points to spend. They expire on {{3}}.",
        ["customer_name", "points", "expiry_date"],
    ),
    _entry(
        19,
        "event_invitation",
        "en_US",
        "MARKETING",
        "Events",
        "Event invitation",
        "Travel and hospitality",
        "You are invited to {{1}} on {{2}}. Will you join us?",
        ["event_name", "date"],
        buttons=_REPLY_YES_NO,
    ),
    _entry(
        20,
        "feedback_request",
        "en_US",
        "MARKETING",
        "Customer feedback",
        "Feedback survey",
        "Technology",
        "Thanks for choosing us, {{1}}! How did we do? Reply with a score from 1 to 5.",
        ["customer_name"],
    ),
    _entry(
        21,
        "oferta_de_bienvenida",
        "es_ES",
        "MARKETING",
        "Promotions",
        "Welcome offer",
        "Retail",
        "¡Bienvenido, {{1}}! Disfruta de un {{2}} de descuento en tu primera compra.",
        ["customer_name", "discount"],
    ),
    _entry(
        22,
        "renewal_reminder",
        "en_US",
        "MARKETING",
        "Loyalty",
        "Subscription renewal",
        "Technology",
        "Hi {{1}}, your {{2}} plan renews on {{3}}. Upgrade today and save.",
        ["customer_name", "plan_name", "renewal_date"],
    ),
    _entry(
        23,
        "promocao_relampago",
        "pt_BR",
        "MARKETING",
        "Promotions",
        "Sale announcement",
        "Retail",
        "Promoção relâmpago! {{1}} de desconto só hoje.",
        ["discount"],
    ),
)


def _same(value: str | None, wanted: str) -> bool:
    return value is not None and value.casefold() == wanted.casefold()


def matches(entry: dict[str, Any], filters: LibraryFilters) -> bool:
    if filters.name and entry["name"] != filters.name:
        return False
    for key, wanted in (
        ("topic", filters.topic),
        ("usecase", filters.usecase),
        ("industry", filters.industry),
        ("language", filters.language),
    ):
        if wanted and not _same(entry[key], wanted):
            return False
    if filters.search:
        keyword = filters.search.casefold()
        haystack = " ".join(
            str(entry[key]) for key in ("name", "body", "topic", "usecase", "industry")
        ).casefold()
        if keyword not in haystack and keyword.replace(" ", "_") not in haystack:
            return False
    return True


def search(filters: LibraryFilters) -> list[dict[str, Any]]:
    return [dict(entry) for entry in CATALOG if matches(entry, filters)]


def find(library_template_id: str) -> dict[str, Any] | None:
    """A catalog entry by id or by name."""
    for entry in CATALOG:
        if library_template_id in (entry["id"], entry["name"]):
            return dict(entry)
    return None
