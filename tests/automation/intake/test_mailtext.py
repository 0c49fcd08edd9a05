"""The sender's own words, told apart from quotes, forwards, signatures and disclaimers."""

from __future__ import annotations

import pytest

from automation.mailtext import DISCLAIMER, FORWARDED, OWN, QUOTED, SIGNATURE, split_text


def kinds(body: str) -> list[str]:
    return [kind for kind, _ in split_text(body).pieces]


@pytest.mark.parametrize(
    "attribution",
    [
        "On Tue, 3 Mar 2026 at 10:02, Ana Silva <ana@example.com> wrote:",
        "Am Di., 3. März 2026 um 10:02 Uhr schrieb Ana Silva <ana@example.com>:",
        "Le mar. 3 mars 2026 à 10:02, Ana Silva <ana@example.com> a écrit :",
        "El mar, 3 mar 2026 a las 10:02, Ana Silva (<ana@example.com>) escribió:",
        "Op di 3 mrt 2026 om 10:02 schreef Ana Silva <ana@example.com>:",
        "Il giorno mar 3 mar 2026 alle ore 10:02 Ana Silva <ana@example.com> ha scritto:",
    ],
)
def test_a_reply_keeps_only_the_senders_words_in_six_languages(attribution: str) -> None:
    body = f"Please cancel the order.\n\n{attribution}\n> We shipped 40 seats today.\n"

    parts = split_text(body)

    assert parts.own == "Please cancel the order."
    assert "We shipped 40 seats" in parts.text(QUOTED)
    assert parts.kind_of("We shipped") == QUOTED


def test_an_attribution_folded_over_two_lines_still_starts_the_quote() -> None:
    body = (
        "Thanks, that works.\n\n"
        "On Tue, 3 Mar 2026 at 10:02, Ana Silva\n<ana@example.com> wrote:\n> old\n"
    )

    assert split_text(body).own == "Thanks, that works."


@pytest.mark.parametrize(
    ("header", "sent", "subject"),
    [
        ("From: Ana Silva", "Sent: Tuesday, March 3, 2026 10:02", "Subject: Invoice 4411"),
        ("Von: Ana Silva", "Gesendet: Dienstag, 3. März 2026 10:02", "Betreff: Rechnung 4411"),
        ("De : Ana Silva", "Envoyé : mardi 3 mars 2026 10:02", "Objet : Facture 4411"),
        ("De: Ana Silva", "Enviado: martes, 3 de marzo de 2026 10:02", "Asunto: Factura 4411"),
        ("Van: Ana Silva", "Verzonden: dinsdag 3 maart 2026 10:02", "Onderwerp: Factuur 4411"),
        ("Da: Ana Silva", "Inviato: martedì 3 marzo 2026 10:02", "Oggetto: Fattura 4411"),
    ],
)
def test_an_outlook_header_block_starts_the_quoted_message(
    header: str, sent: str, subject: str
) -> None:
    body = f"See below, please advise.\n\n{header}\n{sent}\n{subject}\n\nPay 9,800.00 EUR now.\n"

    parts = split_text(body)

    assert parts.own == "See below, please advise."
    assert "Pay 9,800.00 EUR now." in parts.text(QUOTED)


@pytest.mark.parametrize(
    "marker",
    [
        "---------- Forwarded message ---------",
        "-----Original Message-----",
        "Begin forwarded message:",
        "---------- Weitergeleitete Nachricht ----------",
        "-------- Message transféré --------",
        "---------- Mensaje reenviado ---------",
        "---------- Doorgestuurd bericht ---------",
        "---------- Messaggio inoltrato ---------",
    ],
)
def test_a_forwarded_message_is_evidence_not_the_request(marker: str) -> None:
    body = (
        "This looks like phishing, can security have a look?\n\n"
        f"{marker}\nFrom: billing@examp1e-payments.com\nSubject: Overdue invoice\n\n"
        "Your invoice of 4,250.00 EUR is overdue. Pay today via the link below.\n"
    )

    parts = split_text(body)

    assert parts.own == "This looks like phishing, can security have a look?"
    assert "4,250.00 EUR" in parts.text(FORWARDED)
    assert parts.kind_of("4,250.00 EUR") == FORWARDED


def test_signatures_and_disclaimers_are_set_apart() -> None:
    body = (
        "Hello,\n\nour admin account's e-mail and password were changed by someone else.\n"
        "Please lock it.\n\nMit freundlichen Grüßen\nAna Silva\nIT, Northwind GmbH\n"
        "+49 30 1234567\n\n"
        "This e-mail and any attachments are confidential and intended solely for the "
        "addressee. If you are not the intended recipient, please delete it and notify us.\n"
    )

    parts = split_text(body)

    assert parts.own.endswith("Please lock it.")
    assert "Ana Silva" in parts.text(SIGNATURE)
    assert "intended recipient" in parts.text(DISCLAIMER)
    assert kinds(body) == [OWN, SIGNATURE, DISCLAIMER]


def test_the_dash_dash_separator_starts_a_signature() -> None:
    assert split_text("Reset my password please.\n-- \nAna\n").own == "Reset my password please."


@pytest.mark.parametrize(
    "body",
    [
        # A closing word that opens the request is not a signature.
        "Regards, please reset my password: I am locked out since this morning.\n"
        "I tried twice and the link expired each time.\n",
        # "Confidential" said by the sender is the request, not a notice.
        "Hello,\n\nKeep this confidential: our bank details changed, pay invoice 4411 "
        "to the new account from now on.\n",
        # Nothing to recognise: all of it is the sender's.
        "Quote for 40 seats please, delivery to Berlin.\n",
    ],
)
def test_what_is_not_recognised_stays_the_senders_own_text(body: str) -> None:
    assert split_text(body).own == body.strip()
