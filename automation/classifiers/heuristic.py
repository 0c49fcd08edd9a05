"""Offline, deterministic reading: keyword scores and regular expressions, honest confidence.

The default classifier, so the console works with no model service. It proposes like any
model would (and policy checks it like any model's proposal): a category from the words of
the request, the effect the text asks for, and the amounts, dates and references it finds,
each with the sentence it came from. Confidence falls when signals are weak or conflict.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from automation.classifiers.base import ClassifierInput
from automation.extraction import CURRENCIES, MONTH_PATTERN, parse_date, references_in
from automation.mailtext import MessageParts, split_text
from automation.schemas import EffectName, MessagePart, RequestType, Route, event_text, is_mail

VERSION = "heuristic-3"
# The reason code of a reading with no clear signal (a classifier's explicit abstention).
UNCLEAR = "unclear"
# Security words that only set the scene (MFA, a sign-in, a token): a locked-out user writes
# them too, so they count once where other security words count twice (see WEIGHTS).
SECURITY_CONTEXT_WORDS: tuple[str, ...] = (
    "sign-in",
    "sign-ins",
    "sign in attempt",
    "sign-in attempt",
    "sign-in attempts",
    "login attempt",
    "login attempts",
    "log-in attempts",
    "mfa",
    "2fa",
    "two-factor",
    "multi-factor",
    "authenticator",
    "verification code",
    "verification codes",
    "one-time code",
    "one-time password",
    "otp",
    "push notification",
    "push notifications",
    "new device",
    "sim card",
    "credentials",
    "api key",
    "api token",
    "access token",
    "token",
    "oauth",
    "consent",
    "permissions to",
    "zwei-faktor",
    "bestätigungscode",
    "bestätigungscodes",
    "anmeldeversuch",
    "anmeldeversuche",
    "anmeldeanfragen",
    "push-benachrichtigungen",
    "neues gerät",
    "zugangsdaten",
    "sim-karte",
    "double authentification",
    "code de vérification",
    "codes de vérification",
    "tentative de connexion",
    "tentatives de connexion",
    "nouvel appareil",
    "identifiants",
    "carte sim",
    "doble factor",
    "dos factores",
    "código de verificación",
    "códigos de verificación",
    "intento de inicio de sesión",
    "intentos de inicio de sesión",
    "nuevo dispositivo",
    "credenciales",
    "tarjeta sim",
    "tweestapsverificatie",
    "verificatiecode",
    "verificatiecodes",
    "inlogpoging",
    "inlogpogingen",
    "aanmeldpogingen",
    "nieuw apparaat",
    "inloggegevens",
    "simkaart",
    "autenticazione a due fattori",
    "codice di verifica",
    "codici di verifica",
    "tentativo di accesso",
    "tentativi di accesso",
    "credenziali",
    "scheda sim",
    "session",
    "sessions",
    "ip address",
    "admin account",
    "administrator account",
    "new admin",
    "admin user",
    "prompts",
    "laptop",
    "phone number",
    "permissions",
    "repository",
    "sitzung",
    "sitzungen",
    "ip-adresse",
    "admin-konto",
    "administratorkonto",
    "handynummer",
    "berechtigungen",
    "adresse ip",
    "compte administrateur",
    "ordinateur portable",
    "numéro de téléphone",
    "autorisations",
    "sesión",
    "sesiones",
    "dirección ip",
    "cuenta de administrador",
    "portátil",
    "número de teléfono",
    "permisos",
    "sessie",
    "sessies",
    "ip-adres",
    "beheerdersaccount",
    "telefoonnummer",
    "machtigingen",
    "sessione",
    "sessioni",
    "indirizzo ip",
    "account amministratore",
    "portatile",
    "numero di telefono",
    "autorizzazioni",
)
KEYWORDS: dict[str, tuple[str, ...]] = {
    RequestType.SUPPORT: (
        "access",
        "log in",
        "login",
        "locked out",
        "locked",
        "unlock",
        "can't sign in",
        "cannot sign in",
        "can't log in",
        "cannot log in",
        "password",
        "error",
        "not working",
        "help",
        "bug",
        "cannot",
        "support",
        "complaint",
        "broken",
        # de, fr, es
        "passwort",
        "anmeldung",
        "fehler",
        "mot de passe",
        "connexion",
        "contraseña",
        "no funciona",
        "kennwort",
        "funktioniert nicht",
        "störung",
        "erreur",
        "ne fonctionne pas",
        "ne marche pas",
        "acceso",
        "iniciar sesión",
        # nl, it
        "wachtwoord",
        "inloggen",
        "werkt niet",
        "storing",
        "foutmelding",
        "accesso",
        "accedere",
        "errore",
        "non funziona",
        "assistenza",
    ),
    RequestType.BILLING: (
        "invoice",
        "refund",
        "charge",
        "charged",
        "payment",
        "billing",
        "vat",
        "card",
        "credit note",
        "receipt",
        "finance",
        "charged twice",
        "double charge",
        "rechnung",
        "erstattung",
        "facture",
        "remboursement",
        "factura",
        "reembolso",
        "zahlung",
        "gutschrift",
        "paiement",
        "pago",
        "cobro",
        # nl, it
        "factuur",
        "terugbetaling",
        "betaling",
        "creditnota",
        "fattura",
        "rimborso",
        "pagamento",
        "nota di credito",
    ),
    RequestType.SALES: (
        "quote",
        "pricing",
        "price",
        "licence",
        "license",
        "seats",
        "purchase",
        "upgrade",
        "trial",
        "offer",
        "angebot",
        "preis",
        "lizenz",
        "devis",
        "tarif",
        "presupuesto",
        "precio",
        "bestellung",
        "commande",
        "licencia",
        "cotización",
        # nl, it
        "offerte",
        "prijs",
        "prijsopgave",
        "licentie",
        "bestelling",
        "preventivo",
        "prezzo",
        "licenza",
        "offerta",
        "ordine",
    ),
    # Any sign that an account, credential, session, token or device may be in someone
    # else's hands. Written calmly more often than not: "prompts I did not start", "a sign-in
    # from abroad", "my phone lost its signal", so the words of the event count, not only
    # the alarm words.
    RequestType.SECURITY: (
        "suspicious",
        "fraud",
        "fraudulent",
        "breach",
        "data breach",
        "phishing",
        "phished",
        "scam",
        "spoofed",
        "spoofing",
        "impersonating",
        "impersonation",
        "malware",
        "ransomware",
        "virus",
        "hacked",
        "hacker",
        "unauthorised",
        "unauthorized",
        "compromised",
        "account review",
        "security incident",
        "security alert",
        "did not request",
        "didn't request",
        "did not initiate",
        "didn't initiate",
        "not me",
        "wasn't me",
        "someone else",
        "somebody else",
        "unknown device",
        "unrecognised",
        "unrecognized",
        "unfamiliar",
        "unusual activity",
        "unusual sign-in",
        "from abroad",
        "another country",
        "stolen",
        "lost my phone",
        "lost laptop",
        "sim swap",
        "no signal",
        "ported",
        "leaked",
        "leak",
        "exposed",
        "public repository",
        "former employee",
        "left the company",
        "still has access",
        "still have access",
        "nobody created",
        "no one created",
        "did not create",
        "didn't create",
        "is this legit",
        "is this genuine",
        "is this real",
        # de
        "verdächtig",
        "verdächtige",
        "verdächtigen",
        "verdächtiger",
        "kompromittiert",
        "gehackt",
        "unbefugt",
        "unbefugte",
        "unbefugten",
        "betrug",
        "betrügerisch",
        "betrügerische",
        "sicherheitsvorfall",
        "schadsoftware",
        "trojaner",
        "unbekanntes gerät",
        "unbekannten gerät",
        "nicht angefordert",
        "nicht ich",
        "jemand anderes",
        "jemand anders",
        "ausland",
        "gestohlen",
        "gestohlenen",
        "geleakt",
        "ehemaliger mitarbeiter",
        "ehemalige mitarbeiterin",
        "noch zugriff",
        "ist das echt",
        # fr
        "suspect",
        "suspecte",
        "suspects",
        "suspectes",
        "compromis",
        "piratage",
        "piraté",
        "hameçonnage",
        "arnaque",
        "fraude",
        "frauduleux",
        "frauduleuse",
        "logiciel malveillant",
        "incident de sécurité",
        "appareil inconnu",
        "pas moi",
        "quelqu'un d'autre",
        "n'ai pas demandé",
        "à l'étranger",
        "volé",
        "volée",
        "divulgué",
        "accès non autorisé",
        "ancien employé",
        "ancienne employée",
        "toujours accès",
        "est-ce légitime",
        # es
        "sospechoso",
        "sospechosa",
        "sospechosos",
        "hackeado",
        "hackeada",
        "no autorizado",
        "no autorizada",
        "estafa",
        "fraudulento",
        "suplantación",
        "incidente de seguridad",
        "dispositivo desconocido",
        "no fui yo",
        "no lo solicité",
        "otra persona",
        "alguien más",
        "desde el extranjero",
        "robado",
        "robada",
        "filtrado",
        "filtrada",
        "antiguo empleado",
        "ex empleado",
        "sigue teniendo acceso",
        "es legítimo",
        # nl
        "verdacht",
        "verdachte",
        "onbevoegd",
        "onbevoegde",
        "gehackt",
        "gecompromitteerd",
        "oplichting",
        "fraude",
        "beveiligingsincident",
        "onbekend apparaat",
        "niet aangevraagd",
        "was ik niet",
        "iemand anders",
        "buitenland",
        "gestolen",
        "gelekt",
        "uitgelekt",
        "oud-medewerker",
        "voormalig medewerker",
        "nog toegang",
        "is dit echt",
        # it
        "sospetto",
        "sospetta",
        "sospetti",
        "compromesso",
        "non autorizzato",
        "non autorizzata",
        "violato",
        "hackerato",
        "truffa",
        "frode",
        "fraudolento",
        "fraudolenta",
        "incidente di sicurezza",
        "dispositivo sconosciuto",
        "nuovo dispositivo",
        "non ero io",
        "non ho richiesto",
        "qualcun altro",
        "dall'estero",
        "rubato",
        "rubata",
        "trapelato",
        "trapelata",
        "ex dipendente",
        "ha ancora accesso",
        "è legittima",
        # calm words for the same events, in the six languages
        "clicked a link",
        "clicked the link",
        "clicked on a link",
        "clicked on the link",
        "gave access",
        "allowed access",
        "granted access",
        "granted permissions",
        "asked for access to",
        "asked for permission",
        "nobody added",
        "no one added",
        "none of us added",
        "didn't add",
        "did not add",
        "logged in from",
        "signed in from",
        "login from",
        "sign-in from",
        "asking me to approve",
        "asks me to approve",
        "approve a login",
        "approve a sign-in",
        "laptop was lost",
        "laptop is missing",
        "phone is missing",
        "phone was lost",
        "break-in",
        "burglary",
        "emergency calls only",
        "sim not provisioned",
        "number was transferred",
        "number was ported",
        "public github",
        "public gitlab",
        "pushed to github",
        "committed to",
        "someone changed",
        "somebody changed",
        "auf einen link geklickt",
        "link angeklickt",
        "zugriff erteilt",
        "zugriff gewährt",
        "berechtigungen erteilt",
        "niemand hinzugefügt",
        "nicht hinzugefügt",
        "angemeldet aus",
        "anmeldung aus",
        "einbruch",
        "nur notrufe",
        "nummer wurde übertragen",
        "jemand hat mein",
        "jemand hat unser",
        "laptop verloren",
        "handy verloren",
        "cliqué sur un lien",
        "cliqué sur le lien",
        "accordé l'accès",
        "donné accès",
        "autorisé l'accès",
        "personne n'a ajouté",
        "pas ajouté",
        "connecté depuis",
        "connexion depuis",
        "cambriolage",
        "appels d'urgence uniquement",
        "numéro a été transféré",
        "quelqu'un a changé",
        "quelqu'un a modifié",
        "perdu mon téléphone",
        "perdu mon ordinateur",
        "hice clic en un enlace",
        "hice clic en el enlace",
        "concedí acceso",
        "di acceso",
        "permití el acceso",
        "nadie añadió",
        "no añadimos",
        "conectado desde",
        "inicio de sesión desde",
        "robo",
        "solo llamadas de emergencia",
        "número fue transferido",
        "alguien cambió",
        "perdí mi teléfono",
        "perdí mi portátil",
        "op een link geklikt",
        "op de link geklikt",
        "toegang gegeven",
        "toegang verleend",
        "machtigingen verleend",
        "niemand heeft toegevoegd",
        "niet toegevoegd",
        "ingelogd vanuit",
        "aanmelding vanuit",
        "inbraak",
        "alleen noodoproepen",
        "nummer is overgezet",
        "iemand heeft mijn",
        "iemand heeft ons",
        "telefoon kwijt",
        "laptop kwijt",
        "cliccato su un link",
        "cliccato sul link",
        "concesso l'accesso",
        "dato accesso",
        "autorizzato l'accesso",
        "nessuno ha aggiunto",
        "non abbiamo aggiunto",
        "accesso da un paese",
        "collegato da",
        "furto",
        "solo chiamate di emergenza",
        "numero è stato trasferito",
        "qualcuno ha cambiato",
        "qualcuno ha modificato",
        "perso il telefono",
        "perso il portatile",
        "fake",
        "lookalike",
        "look-alike",
        "fishy",
        "abroad",
        "never been to",
        "not us",
        "wasn't us",
        "none of us",
        "don't recognise",
        "don't recognize",
        "do not recognise",
        "do not recognize",
        "didn't recognise",
        "didn't recognize",
        "no idea who",
        "without my knowledge",
        "without our knowledge",
        "wasn't logging in",
        "was not logging in",
        "didn't log in",
        "did not log in",
        "didn't sign in",
        "did not sign in",
        "revoke",
        "revoked",
        "rotate the",
        "unknown app",
        "third-party app",
        "still logged in",
        "active sessions",
        "changed by someone",
        "no service",
        "lost signal",
        "gefälscht",
        "gefälschte",
        "gefälschten",
        "nicht wir",
        "niemand von uns",
        "kenne ich nicht",
        "kennen wir nicht",
        "ohne mein wissen",
        "ohne unser wissen",
        "widerrufen",
        "noch angemeldet",
        "aktive sitzungen",
        "kein netz",
        "kein empfang",
        "faux",
        "fausse",
        "pas nous",
        "aucun de nous",
        "ne reconnais pas",
        "ne reconnaissons pas",
        "à mon insu",
        "à notre insu",
        "révoquer",
        "toujours connecté",
        "sessions actives",
        "plus de réseau",
        "falso",
        "falsa",
        "no fuimos nosotros",
        "ninguno de nosotros",
        "no reconozco",
        "no reconocemos",
        "sin mi conocimiento",
        "revocar",
        "sigue conectado",
        "sesiones activas",
        "sin señal",
        "sin servicio",
        "nep",
        "valse",
        "waren wij niet",
        "niemand van ons",
        "herken ik niet",
        "herkennen we niet",
        "zonder mijn medeweten",
        "intrekken",
        "nog ingelogd",
        "actieve sessies",
        "geen bereik",
        "geen signaal",
        "finto",
        "finta",
        "non siamo stati noi",
        "nessuno di noi",
        "non riconosco",
        "non riconosciamo",
        "a mia insaputa",
        "a nostra insaputa",
        "revocare",
        "ancora connesso",
        "sessioni attive",
        "nessun segnale",
        "senza segnale",
        # and the words that only set the scene (SECURITY_CONTEXT), which count once
        *SECURITY_CONTEXT_WORDS,
    ),
}
# A word listed under two languages counts once.
KEYWORDS = {category: tuple(dict.fromkeys(words)) for category, words in KEYWORDS.items()}
# Security wins over every other category: a missed compromise costs far more than a person
# reading a message that was harmless, so each of its words counts twice...
WEIGHTS: dict[str, int] = {RequestType.SECURITY: 2}
# ...except the words that only set the scene.
SECURITY_CONTEXT = frozenset(SECURITY_CONTEXT_WORDS)
ROUTES = {
    RequestType.SUPPORT: Route.SERVICE_DESK,
    RequestType.BILLING: Route.FINANCE,
    RequestType.SALES: Route.COMMERCIAL,
    RequestType.SECURITY: Route.SECURITY_REVIEW,
}
EFFECT_CUES: dict[str, tuple[str, ...]] = {
    EffectName.QUEUE_ACCOUNT_REVIEW: ("account review", "review the account", "review of"),
    EffectName.SEND_INTERNAL_NOTIFICATION: ("notify", "notification", "let finance know"),
    EffectName.CREATE_FOLLOW_UP: ("follow up", "follow-up", "call back", "get back", "reply"),
}
CODES = "|".join(sorted(CURRENCIES))
AMOUNT = re.compile(
    rf"(?:(?P<symbol>[€$£])\s?(?P<a>\d[\d.,']*\d|\d))"
    rf"|(?:\b(?P<pre>{CODES})\s?(?P<c>\d[\d.,']*\d|\d))"
    rf"|(?:(?P<b>\d[\d.,' ]*\d|\d)\s?(?P<code>{CODES})\b)"
    # A three-letter code after a number with decimals is read as a currency, known or not:
    # an unknown one is then held for a person instead of being dropped.
    r"|(?:(?P<d>\d[\d.,' ]*[.,]\d{2})\s?(?P<other>[A-Z]{3})\b)"
    # The symbol after the number, as most of Europe writes it: "1 250,00 €".
    # Thousands in groups of three (a space, a dot, a comma or an apostrophe), so a number
    # written before it ("invoice 4411 1 250,00 €") is not read into the amount.
    "|(?:(?P<e>\\d{1,3}(?:[ \u00a0\u202f.,']\\d{3})+(?:[.,]\\d{2})?|\\d+(?:[.,]\\d{1,2})?)"
    "[\u00a0\u202f ]?(?P<post>[€$£]))"
)
# The amount a message is about: a total, an amount due or in dispute, not a unit price.
TOTAL = re.compile(
    r"\b(total|amount due|grand total|balance due|disputed|charged twice|"
    r"gesamt\w*|summe|betrag|strittig|montant|à payer|contest\w+|importe|total a pagar|"
    r"en disputa|totaal|te betalen|betwist\w*|totale|importo|da pagare|contestat\w+)\b",
    re.IGNORECASE,
)
DATE = re.compile(
    rf"\b(\d{{4}}-\d{{2}}-\d{{2}}"
    rf"|\d{{1,2}}\.?\s(?:de\s)?(?:{MONTH_PATTERN})\.?\s(?:de\s)?\d{{4}}"
    rf"|(?:{MONTH_PATTERN})\.?\s\d{{1,2}},?\s\d{{4}})\b",
    re.IGNORECASE,
)
# INV-4411, PO-2027-0088: letters, then one to three groups of digits.
REFERENCE = re.compile(r"\b(?!CUST-)[A-Z]{2,4}(?:-\d{2,8}){1,3}\b")
SYMBOLS = {"€": "EUR", "$": "USD", "£": "GBP"}
PLAIN = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\u2010": "-", "\u2011": "-"})


@lru_cache(maxsize=2048)
def _word(word: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w){re.escape(word)}(?!\w)")


def _hits(text: str, words: tuple[str, ...]) -> int:
    # The substring test first: most words are not in a message at all.
    return sum(len(_word(word).findall(text)) for word in words if word in text)


def _plain(text: str) -> str:
    """Lower case, with typographic apostrophes and hyphens written plainly."""
    return text.lower().translate(PLAIN)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if s.strip()]


def _source(sentences: list[str], found: str) -> str:
    return next((s for s in sentences if found in s), found)


def extract(text: str) -> dict[str, dict[str, Any]]:
    """Amounts, dates and references, each with the sentence it was read from."""
    sentences = _sentences(text)
    fields: dict[str, dict[str, Any]] = {}
    if match := _amount(text):
        number = next(match.group(g) for g in "abcde" if match.group(g))
        currency = SYMBOLS.get(match.group("symbol") or match.group("post") or "") or (
            match.group("code") or match.group("pre") or match.group("other") or ""
        )
        value = f"{number.strip()} {currency}".strip()
        fields["amount"] = {
            "value": value,
            "confidence": 0.8,
            "source": _source(sentences, match.group(0)),
        }
    if found := _date(text):
        fields["date"] = {
            "value": found,
            "confidence": 0.85,
            "source": _source(sentences, found),
        }
    if match := REFERENCE.search(text):
        fields["reference"] = {
            "value": match.group(0),
            "confidence": 0.9,
            "source": _source(sentences, match.group(0)),
        }
    if customers := references_in(text):
        fields["customer_reference"] = {
            "value": customers[0],
            "confidence": 0.9 if len(customers) == 1 else 0.6,
            "source": _source(sentences, customers[0]),
        }
    return fields


def _date(text: str) -> str | None:
    """The first date, unless a date-shaped text is no date at all: that one is reported."""
    dates = [match.group(1) for match in DATE.finditer(text)]
    for candidate in dates:
        try:
            parse_date(candidate)
        except ValueError:
            return candidate
    return dates[0] if dates else None


def _amount(text: str) -> re.Match[str] | None:
    """The amount that matters: the one on a line that says it is the total, else the first."""
    matches = list(AMOUNT.finditer(text))
    for match in matches:
        line_start = text.rfind("\n", 0, match.start()) + 1
        if TOTAL.search(text[line_start : match.start()]):
            return match
    return matches[0] if matches else None


# What an e-mail most likely wants when it names no effect: it states no action of its own.
MAIL_EFFECTS = {
    RequestType.SUPPORT: EffectName.CREATE_FOLLOW_UP,
    RequestType.BILLING: EffectName.SEND_INTERNAL_NOTIFICATION,
    RequestType.SALES: EffectName.CREATE_FOLLOW_UP,
    RequestType.SECURITY: EffectName.QUEUE_ACCOUNT_REVIEW,
}


def intent_text(normalized: dict[str, Any], parts: MessageParts | None = None) -> str:
    """What a request is read from: the subject and, for an e-mail, the sender's own words
    (without quotes, forwards, signature and disclaimer); for an event, its body."""
    subject = str(normalized.get("subject", ""))
    if is_mail(normalized):
        parts = parts or split_text(str(normalized.get("body", "")))
        return f"{subject}.\n\n{parts.own}"
    return f"{subject}. {normalized.get('body', '')}"


def read(normalized: dict[str, Any]) -> dict[str, Any]:
    """The proposal for one event; pure, so tests and replays get the same answer.

    An e-mail's intent is read from its subject and the sender's own words; what it carries
    along (quotes, forwards, attachments) is read only when those say nothing, and then at
    half the confidence. Facts are taken from the sender's words first, and each says which
    part of the message it came from."""
    mail = is_mail(normalized)
    subject = str(normalized.get("subject", ""))
    parts = split_text(str(normalized.get("body", ""))) if mail else MessageParts()
    intent = intent_text(normalized, parts if mail else None)
    original = event_text(normalized) if mail else intent
    category, best, confidence, tied = _intent(_plain(intent), normalized)
    carried = mail and best == 0
    if carried:  # nothing in the sender's own words: what they sent along is all there is
        category, best, confidence, tied = _intent(_plain(original), normalized)
        confidence /= 2
    text = _plain(original if carried else intent)
    cues = {effect: _hits(text, words) for effect, words in EFFECT_CUES.items()}
    effect = max(cues, key=lambda name: cues[name]) if any(cues.values()) else None
    if mail and category == RequestType.SECURITY:
        effect = EffectName.QUEUE_ACCOUNT_REVIEW  # whatever else it asks, the account first
    if effect is None:
        requested = normalized.get("requested_action", "")
        known = {member.value for member in EffectName}
        if mail:
            effect = MAIL_EFFECTS[RequestType(category)]
        else:
            effect = requested if requested in known else EffectName.CREATE_FOLLOW_UP
        confidence *= 0.9
    fields = {**extract(original), **extract(intent)}  # the sender's own words win
    if mail:
        _mark_parts(fields, subject, parts, normalized)
        if normalized.get("sender_name"):
            fields["sender_name"] = {"value": normalized["sender_name"][:500], "confidence": 0.95}
    # No signal, or two categories signalled equally with nothing stated to choose between
    # them: the category is a fallback, and the reading says so (policy sends it to a person).
    reason = "unclear.tie" if tied else f"{category}_keywords" if best else UNCLEAR
    return {
        "category": str(category),
        "recommended_route": str(ROUTES[RequestType(category)]),
        "requested_effect": str(effect),
        "reason_code": f"{reason}.carried" if carried and best else reason,
        "confidence": round(confidence, 2),
        "fields": fields,
    }


def _score(text: str, category: str) -> int:
    weight = WEIGHTS.get(category, 1)
    return sum(
        len(_word(word).findall(text)) * (1 if word in SECURITY_CONTEXT else weight)
        for word in KEYWORDS[category]
        if word in text
    )


def _intent(text: str, normalized: dict[str, Any]) -> tuple[str, int, float, bool]:
    """(category, its keyword hits, confidence, whether it is a guess between equals) read
    from `text`, lower-cased."""
    scores = {category: _score(text, category) for category in KEYWORDS}
    stated = normalized.get("request_type")
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0] != stated))
    (category, best), (runner_up, second) = ranked[0], ranked[1]
    tied = best > 0 and best == second and stated not in (category, runner_up)
    if best == 0:
        # No signal in the words: keep the stated type, and say how little this is worth.
        category, confidence = normalized.get("request_type", RequestType.SUPPORT), 0.3
    else:
        # Keywords are never certain: even a clear, unopposed signal stays below 0.9.
        strength = min(0.9, 0.55 + 0.15 * best)
        confidence = strength * best / (best + second)
    return str(category), best, confidence, tied


def _mark_parts(
    fields: dict[str, dict[str, Any]],
    subject: str,
    parts: MessageParts,
    normalized: dict[str, Any],
) -> None:
    """Say which part of the message each fact was read from."""
    attachments = [str(a.get("text") or "") for a in normalized.get("attachments") or []]
    for found in fields.values():
        source = str(found.get("source") or found.get("value") or "")
        if source and source in subject:
            found["part"] = MessagePart.SUBJECT.value
        elif any(source and source in text for text in attachments) and not any(
            source in text for _, text in parts.pieces
        ):
            found["part"] = MessagePart.ATTACHMENT.value
        else:
            found["part"] = parts.kind_of(source)


class HeuristicClassifier:
    name = "heuristic"
    # Pure and in-process: the pipeline reads with it inside the run's transaction.
    local = True
    version = VERSION

    def classify(self, event: ClassifierInput, attempt: int, *, deadline: float) -> Any:
        return read(event.normalized)
