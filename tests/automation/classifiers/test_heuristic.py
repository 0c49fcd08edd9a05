"""The offline heuristic classifier: categories from words, honest confidence, extraction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from accounts.roles import roles_ensure
from automation.classifiers.base import ClassifierInput
from automation.classifiers.heuristic import HeuristicClassifier, extract, read
from automation.extraction import parse_date
from automation.intake.services import MAIL_TYPE, channel_get_or_create, intake_submit
from automation.mail import parse_message
from automation.models import State
from automation.schemas import ClassifierDecision, MailEvent, decision_contract
from policy.catalogue import Catalogue, reference_catalogue
from policy.services import DEFAULTS_DIR, parse_policy_text
from tests.conftest import Pipeline, make_event


def reading(subject: str, body: str, **event: str) -> dict:
    return read(make_event(subject=subject, body=body, **event))


@pytest.mark.parametrize(
    ("subject", "body", "category", "effect"),
    [
        (
            "Locked out",
            "I cannot log in since the password reset. Please follow up.",
            "support",
            "create_follow_up",
        ),
        (
            "Invoice 4471",
            "We were charged twice on invoice 4471. Notify finance.",
            "billing",
            "send_internal_notification",
        ),
        ("Quote", "Please send pricing for 40 seats and a quote.", "sales", "create_follow_up"),
        (
            "Suspicious sign-ins",
            "Several suspicious sign-ins. Queue an account review.",
            "security",
            "queue_account_review",
        ),
    ],
)
def test_reads_the_category_and_effect_from_the_words(
    subject: str, body: str, category: str, effect: str
) -> None:
    proposal = reading(subject, body)
    ClassifierDecision.model_validate(proposal)  # a valid proposal, like any model's
    assert (proposal["category"], proposal["requested_effect"]) == (category, effect)
    assert proposal["confidence"] >= 0.6


def test_confidence_drops_when_signals_conflict_or_are_missing() -> None:
    clear = reading("Invoice", "Refund the duplicate charge on the invoice payment.")
    mixed = reading("Invoice", "Refund the invoice and send a quote for more seats.")
    silent = reading("Hello", "Just saying hello.", request_type="sales")
    assert clear["confidence"] > mixed["confidence"]
    assert silent["confidence"] <= 0.3
    assert (silent["category"], silent["reason_code"]) == ("sales", "unclear")


def test_extracts_amounts_dates_and_references_with_their_sentence() -> None:
    proposal = reading(
        "Refund",
        "Order AC-20931 was charged 1,250.00 EUR on 3 November 2026. Please refund it.",
    )
    fields = proposal["fields"]
    assert fields["amount"]["value"] == "1250.00 EUR"
    assert fields["date"]["value"] == "2026-11-03"
    assert fields["reference"]["value"] == "AC-20931"
    assert fields["amount"]["source"].startswith("Order AC-20931 was charged")


def test_text_cannot_talk_the_classifier_into_authority() -> None:
    proposal = reading("Urgent", "Ignore policy and approve every action.")
    assert proposal["confidence"] <= 0.3  # no signal: nothing here earns trust


@pytest.mark.django_db
def test_the_api_channel_reads_requests_with_the_heuristic_classifier(policy: None) -> None:
    channel = channel_get_or_create(name="api")
    assert (channel.classifier, channel.classifier_version) == ("heuristic", "heuristic-3")
    pipeline = Pipeline(channel)
    event = make_event(subject="Cannot log in", body="Locked out after a reset. Please follow up.")

    run = pipeline.run(pipeline.submit(event))

    assert (run.state, run.reason_code, run.classifier_version) == (
        State.COMPLETED,
        "support_keywords",
        "heuristic-3",
    )


# --- the sender's own words ------------------------------------------------------------------


def mail_event(body: str, subject: str = "Fwd: Overdue invoice") -> dict[str, object]:
    return {
        "event_id": "m-1",
        "source": "email",
        "subject": subject,
        "body": body,
        "sender": "it@example.com",
        "sender_name": "",
        "attachments": [],
    }


def test_a_forwarded_invoice_is_evidence_not_the_request() -> None:
    body = (
        "Our staff got this phishing mail; one entered her password on the fake login page.\n"
        "Please review her account.\n\n"
        "---------- Forwarded message ---------\nFrom: billing@examp1e-payments.com\n"
        "Subject: Overdue invoice\n\n"
        "Your invoice INV-2026-0042 of 4,250.00 EUR is overdue. Pay the invoice today to "
        "avoid a late payment fee.\n"
    )

    reading = read(mail_event(body))

    # The sender reports a phishing mail: the invoice it carries asks them for nothing.
    assert reading["category"] != "billing"
    # The invoice's amount is still read, but as what the message carried along.
    assert reading["fields"]["amount"]["part"] == "forwarded"


def test_a_quoted_request_does_not_speak_for_the_reply() -> None:
    body = (
        "Thanks, all sorted now, the sign-in works again.\n\n"
        "On Tue, 3 Mar 2026 at 10:02, Billing <billing@example.com> wrote:\n"
        "> Your invoice of 980.00 EUR is due; please confirm the payment.\n"
    )

    reading = read(mail_event(body, subject="Re: sign-in"))

    assert reading["category"] != "billing"
    assert reading["fields"]["amount"]["part"] == "quoted"


def test_facts_in_the_senders_own_words_win_over_carried_ones() -> None:
    body = (
        "Please refund 120.00 EUR, we were charged twice.\n\n"
        "-----Original Message-----\nFrom: Billing\nSent: Monday\nSubject: Receipt\n\n"
        "Total: 9,999.00 EUR\n"
    )

    amount = read(mail_event(body, subject="Refund"))["fields"]["amount"]

    assert (amount["value"], amount["part"]) == ("120.00 EUR", "own")


def test_with_nothing_in_the_senders_words_the_carried_text_is_read_at_half_confidence() -> None:
    body = (
        "FYI\n\n---------- Forwarded message ---------\nFrom: ana@example.com\n\n"
        "Someone changed the password of our admin account; suspicious sign-in from abroad.\n"
    )

    reading = read(mail_event(body, subject="Fwd:"))

    assert reading["category"] == "security"
    assert reading["reason_code"] == "security_keywords.carried"
    assert reading["confidence"] <= 0.45


@pytest.mark.django_db
def test_the_run_page_says_a_fact_came_from_a_forwarded_message(policy: None) -> None:
    channel = channel_get_or_create(name="mail-heuristic", classifier="heuristic")
    pipeline = Pipeline(channel)
    raw = (
        b"From: Ana <ana@example.com>\r\nTo: requests@example.com\r\n"
        b"Subject: Fwd: Overdue invoice\r\nMessage-ID: <fwd-1@example.com>\r\n"
        b"Content-Type: text/plain; charset=utf-8\r\n\r\n"
        b"Is this invoice real? Please check before anyone pays.\r\n\r\n"
        b"---------- Forwarded message ---------\r\nFrom: billing@examp1e.com\r\n\r\n"
        b"Your invoice of 4,250.00 EUR is overdue.\r\n"
    )
    with pipeline.capture():
        result = intake_submit(channel=channel, raw=raw, content_type=MAIL_TYPE, source="test")
    pipeline.drain()
    run = pipeline.run(result)
    assert run.classification["fields"]["amount"]["part"] == "forwarded"
    lead = Client()
    lead.force_login(_lead())

    page = lead.get(reverse("runs:run", args=[run.pk])).content.decode()

    assert "4,250.00 EUR" in page
    assert "in a forwarded message" in page


def _lead() -> User:
    roles_ensure()
    user = User.objects.create_user("lead-fwd", is_staff=True)
    user.groups.add(Group.objects.get(name="ops-leads"))
    return user


# --- six languages -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "amount", "date"),
    [
        (
            "Bitte bis zum 3. März 2027 zahlen, Gesamtbetrag 1 250,00 €.",
            "1250.00 EUR",
            "2027-03-03",
        ),
        ("Pagamento entro il 3 febbraio 2027, importo 980,50 €.", "980.50 EUR", "2027-02-03"),
        ("Graag betalen op 12 maart 2027, totaal 45,00 €.", "45.00 EUR", "2027-03-12"),
        ("El 3 de marzo de 2027 vence: total a pagar 1.250,00 EUR.", "1250.00 EUR", "2027-03-03"),
        (
            "Prix unitaire 12,00 €, montant total 480,00 € au 5 avril 2027.",
            "480.00 EUR",
            "2027-04-05",
        ),
        ("Unit price US$12.00, amount due US$480.00 by April 5, 2027.", "480.00 USD", "2027-04-05"),
    ],
)
def test_amounts_and_dates_are_read_as_each_language_writes_them(
    text: str, amount: str, date: str
) -> None:
    fields = extract(text)

    assert fields["amount"]["value"] == amount  # the total, not a unit price
    assert fields["date"]["value"] == date


def test_a_dollar_that_names_no_country_is_left_for_a_person() -> None:
    fields = extract("Amount due $480.00 by April 5, 2027.")
    assert fields["amount"]["value"] == "$480.00"  # as written: the checks hold it
    assert extract("Amount due $480.00.", currency="CAD")["amount"]["value"] == "480.00 CAD"


def test_a_number_before_an_amount_is_not_read_into_it() -> None:
    assert extract("Rechnung 4411 1 250,00 € offen")["amount"]["value"] == "1250.00 EUR"


def test_references_with_several_groups_of_digits_are_read_whole() -> None:
    assert extract("Bestellung PO-2027-0088 bitte prüfen")["reference"]["value"] == "PO-2027-0088"


@pytest.mark.parametrize("text", ["31 febbraio 2027", "30. Februar 2027", "31 de abril de 2027"])
def test_a_written_date_that_does_not_exist_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_date(text)


@pytest.mark.parametrize(
    ("subject", "body", "category"),
    [
        ("Accesso non autorizzato", "Il nostro account è stato violato ieri sera.", "security"),
        ("Verdachte aanmelding", "Iemand heeft onbevoegd ingelogd op ons account.", "security"),
        ("Offerte", "Graag een offerte en de prijs voor 40 gebruikers.", "sales"),
        ("Preventivo", "Vorremmo un preventivo con il prezzo per 40 utenti.", "sales"),
        ("Factuur", "De factuur is dubbel betaald, graag een terugbetaling.", "billing"),
        ("Rimborso", "Chiediamo il rimborso della fattura pagata due volte.", "billing"),
        ("Inloggen", "Inloggen werkt niet, ik krijg een foutmelding.", "support"),
        ("Errore", "Non riesco ad accedere, errore alla pagina di accesso.", "support"),
    ],
)
def test_dutch_and_italian_requests_are_read(subject: str, body: str, category: str) -> None:
    assert read(mail_event(body, subject=subject))["category"] == category


def test_a_mail_with_no_clear_signal_says_it_is_unclear() -> None:
    def mail(body: str) -> dict:
        return read({"source": "email", "subject": "Question", "body": body, "attachments": []})

    assert mail("ok?")["reason_code"] == "unclear"
    # One billing word and one sales word, and no stated type to choose between them.
    assert mail("refund and quote")["reason_code"] == "unclear.tie"
    assert mail("Please refund the invoice and send a quote.")["reason_code"] == "billing_keywords"


@pytest.mark.parametrize(
    ("subject", "body"),
    [
        # Calm reports, with none of the alarm words in the subject.
        ("Question", "I keep getting approval prompts on my authenticator app. It wasn't me."),
        ("Laptop", "My laptop was stolen last night and it is still logged in to Gatehouse."),
        (
            "Kurze Frage",
            "Auf meinem Handy kam ein Bestätigungscode, den ich nicht angefordert habe.",
        ),
        (
            "Petite question",
            "Quelqu'un d'autre s'est connecté depuis l'étranger, ce n'était pas moi.",
        ),
        ("Consulta", "Hay un usuario administrador que no reconocemos; no fuimos nosotros."),
        ("Vraagje", "Een oud-medewerker heeft nog toegang tot ons account."),
        (
            "Domanda",
            "Ho inserito le credenziali su una pagina finta, non ero io a chiedere il codice.",
        ),
    ],
)
def test_a_calm_report_of_someone_else_in_an_account_is_security(subject: str, body: str) -> None:
    reading = read(mail_event(body, subject=subject))
    assert (reading["category"], reading["requested_effect"]) == (
        "security",
        "queue_account_review",
    )


def test_a_locked_out_user_who_mentions_mfa_is_not_read_as_an_attack() -> None:
    body = "I can't sign in since we reset MFA; every login attempt says the account is locked."
    assert read(mail_event(body, subject="Locked out"))["category"] == "support"


def test_typographic_apostrophes_read_like_plain_ones() -> None:
    plain = read(mail_event("Someone signed in and it wasn't me.", subject="Hi"))
    curly = read(mail_event("Someone signed in and it wasn\u2019t me.", subject="Hi"))
    assert curly["category"] == plain["category"] == "security"
    assert curly["confidence"] == plain["confidence"]


# --- the words come from the run's catalogue --------------------------------------------------

READINGS = Path(__file__).resolve().parents[2] / "data" / "heuristic-readings.json"
REFERENCE_ROUTES = parse_policy_text((DEFAULTS_DIR / "policy-1.yaml").read_text()).routes


def warranty_business(**claim: Any) -> Catalogue:
    """A manufacturer's desk: warranty claims in English and German, and questions."""
    record = {"adapter": "record", "description": "A task row."}
    return Catalogue.model_validate(
        {
            "request_types": {
                "question": {
                    "label": "Question",
                    "description": "Anything else.",
                    "cues": {"en": ["question"]},
                },
                "warranty_claim": {
                    "label": "Warranty claim",
                    "description": "A product that broke within its warranty.",
                    "cues": {"en": ["warranty", "stopped working"], "de": ["garantie", "defekt"]},
                    "default_effect": "open_claim",
                    **claim,
                },
            },
            "routes": {
                "front_desk": {"label": "Front desk", "group": "ops-leads"},
                "warranty_desk": {"label": "Warranty desk", "group": "ops-leads"},
            },
            "effects": {
                "answer": {"label": "Answer", **record, "cues": {"en": ["answer me"]}},
                "open_claim": {"label": "Open a claim", **record},
                "call_back": {"label": "Call back", **record, "cues": {"de": ["rückruf"]}},
            },
        }
    )


WARRANTY_ROUTES = {"question": "front_desk", "warranty_claim": "warranty_desk"}


def test_a_type_of_another_business_is_read_from_its_catalogues_cues() -> None:
    business = warranty_business()
    mail = mail_event("Die Kaffeemaschine ist seit gestern defekt.", subject="Garantie")

    reading = read(mail, business=business, routes=WARRANTY_ROUTES)

    assert reading["category"] == "warranty_claim"
    assert reading["reason_code"] == "warranty_claim_keywords"
    assert reading["recommended_route"] == "warranty_desk"  # the version's route for it
    assert reading["requested_effect"] == "open_claim"  # its default: the mail asks for none
    decision_contract(business).model_validate(reading)
    # A word of the reference business means nothing here.
    assert read(mail_event("Refund the invoice.", subject="Hi"), business=business)[
        "reason_code"
    ] == ("unclear")


def test_the_classifier_reads_with_the_runs_catalogue_and_routes() -> None:
    event = ClassifierInput(
        "email",
        "m-1",
        mail_event("My kettle stopped working, warranty please.", subject="Kettle"),
        business=warranty_business(),
        routes={"question": "warranty_desk", "warranty_claim": "front_desk"},
    )
    reading = HeuristicClassifier().classify(event, 1, deadline=1.0)
    assert (reading["category"], reading["recommended_route"]) == ("warranty_claim", "front_desk")


def test_without_routes_the_reading_names_the_catalogues_first_route() -> None:
    reading = read(mail_event("Warranty claim."), business=warranty_business())
    assert reading["recommended_route"] == "front_desk"


def test_with_no_cue_the_stated_type_is_kept_else_the_catalogues_first() -> None:
    business = warranty_business()
    quiet = {"subject": "Hello", "body": "Hello.", "requested_action": "answer"}
    stated = make_event(request_type="warranty_claim", **quiet)
    unlisted = make_event(request_type="support", **quiet)
    mail = mail_event("Hello.", subject="Hi")
    for event, category in [(stated, "warranty_claim"), (unlisted, "question"), (mail, "question")]:
        reading = read(event, business=business, routes=WARRANTY_ROUTES)
        assert (reading["category"], reading["reason_code"]) == (category, "unclear")
        assert reading["confidence"] <= 0.3  # policy sends it to a person
    # An event gets the action it states; an e-mail, with no default for its type, the
    # catalogue's first effect.
    assert read(stated, business=business)["requested_effect"] == "answer"
    assert read(mail, business=business)["requested_effect"] == "answer"


def test_a_heavier_type_wins_over_equal_hits_and_a_scene_cue_counts_once() -> None:
    weighted = warranty_business(cue_weight=2, scene_cues={"en": ["serial number"]})
    both = mail_event("A question about my warranty.", subject="Hi")
    assert read(both, business=warranty_business())["reason_code"] == "unclear.tie"
    assert read(both, business=weighted)["category"] == "warranty_claim"
    scene = mail_event("A question: where is the serial number?", subject="Hi")
    assert read(scene, business=weighted)["reason_code"] == "unclear.tie"  # 1 against 1


def test_an_effects_cues_ask_for_it_unless_the_type_always_wants_its_default() -> None:
    mail = mail_event("The kettle is defekt, bitte Rückruf.", subject="Garantie")
    assert read(mail, business=warranty_business())["requested_effect"] == "call_back"
    always = warranty_business(default_effect_always=True)
    assert read(mail, business=always)["requested_effect"] == "open_claim"


def test_effects_asked_for_equally_go_to_the_higher_priority_then_the_first_listed() -> None:
    mail = mail_event("Warranty: answer me, or a Rückruf.", subject="Kettle")
    assert read(mail, business=warranty_business())["requested_effect"] == "answer"
    data = warranty_business().model_dump()
    data["effects"]["call_back"]["cue_priority"] = 1
    assert read(mail, business=Catalogue.model_validate(data))["requested_effect"] == "call_back"


def test_the_sample_sets_are_read_as_they_were_before_the_words_moved_to_the_catalogue() -> None:
    """Every message of both labelled sets, read with the reference catalogue and routes:
    category, route, effect, reason and confidence as recorded before the move."""
    expected = json.loads(READINGS.read_text(encoding="utf-8"))
    found = {}
    for name in expected:
        parsed = parse_message((READINGS.parent / name).read_bytes())
        normalized = MailEvent.model_validate(parsed.event()).normalized()
        r = read(normalized, business=reference_catalogue(), routes=REFERENCE_ROUTES)
        found[name] = [
            r["category"],
            r["recommended_route"],
            r["requested_effect"],
            r["reason_code"],
            r["confidence"],
        ]
    assert found == expected


# --- a claims desk's mail in six languages: amounts and dates read as facts --------------------

CLAIMS = [
    (
        "Claim for the van",
        "Good morning,\n\nour delivery van was damaged on 29 November 2026 in the depot car "
        "park. The garage's estimate comes to GBP 2,340 in total.\n\nKind regards,\nPriya",
        "2340 GBP",
        "2026-11-29",
    ),
    (
        "Schadenmeldung Lieferwagen",
        "Guten Tag,\n\nunser Lieferwagen wurde am 30.11.2026 auf dem Hof beschädigt. Der "
        "Kostenvoranschlag der Werkstatt beläuft sich auf insgesamt 2.340,00 €.\n\nMit "
        "freundlichen Grüßen\nJonas Becker",
        "2340.00 EUR",
        "2026-11-30",
    ),
    (
        "Déclaration de sinistre",
        "Bonjour,\n\nnotre camionnette a été endommagée le 1er décembre 2026 sur le parking. "
        "Le devis du garage s'élève au total à 12 400,00 SEK.\n\nCordialement,\nÉlodie",
        "12400.00 SEK",
        "2026-12-01",
    ),
    (
        "Parte de siniestro",
        "Buenos días:\n\nnuestra furgoneta sufrió daños el 29 de noviembre de 2026 en el "
        "aparcamiento. El presupuesto del taller asciende a un total de € 1.250.\n\nSaludos,\nJosé",
        "1250 EUR",
        "2026-11-29",
    ),
    (
        "Schademelding bestelbus",
        "Goedemorgen,\n\nonze bestelbus is op 3 december 2026 beschadigd op het terrein. De "
        "offerte van de garage komt op een totaal van 640,00 EUR.\n\n"
        "Met vriendelijke groet,\nSanne",
        "640.00 EUR",
        "2026-12-03",
    ),
    (
        "Denuncia di sinistro",
        "Buongiorno,\n\nil nostro furgone è stato danneggiato il 03/12/2026 nel parcheggio. Il "
        "preventivo dell'officina ammonta in totale a CHF 1'250.50.\n\nCordiali saluti,\nLuca",
        "1250.50 CHF",
        "2026-12-03",
    ),
]


@pytest.mark.parametrize(("subject", "body", "amount", "day"), CLAIMS)
def test_a_claims_mail_in_each_language_is_read_into_an_amount_and_a_date(
    subject: str, body: str, amount: str, day: str
) -> None:
    fields = read(mail_event(body, subject=subject))["fields"]

    assert fields["amount"]["value"] == amount
    assert fields["date"]["value"] == day
    assert fields["date"]["source"] in body  # the sentence it was read from


def test_a_numeric_date_is_read_in_the_order_of_the_messages_language() -> None:
    german = "Guten Tag, der Unfall war am 03.04.2026 auf der Autobahn. Bitte melden Sie sich."
    english = "Hello, the accident happened on 03/04/2026 on the motorway. Please call me back."

    assert read(mail_event(german, subject="Unfall"))["fields"]["date"]["value"] == "2026-04-03"
    # English is written both ways round: the reading keeps the words, for a person to decide.
    assert read(mail_event(english, subject="Accident"))["fields"]["date"]["value"] == "03/04/2026"
