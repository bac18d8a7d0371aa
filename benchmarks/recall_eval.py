"""The recall evaluation set: 200 facts about 20 people, 100 questions that paraphrase them,
and distractors.

Each person has one fact of each of ten kinds (job, pet, hometown, …), so every question has
nineteen same-kind facts about other people and nine other facts about the same person competing
with its answer. Half the kinds' questions share no content word with their fact but the name, as
far as the
language allows ("What does Alice do for a living?" for "Alice works as a nurse"); the other
half are asked the way people usually ask, sharing one word with the fact ("Is Alice allergic
to anything?"). Distractors add near misses about the people's relatives and neighbours (with
the same words) and facts about the server.
"""

from __future__ import annotations

from dataclasses import dataclass

PEOPLE = (
    "Alice", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas",
    "Keiko", "Luca", "Maya", "Nikolai", "Olga", "Pedro", "Quinn", "Rosa", "Sven", "Tariq",
)  # fmt: skip

# kind → (fact template, question template, twenty values)
KINDS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "job": (
        "{p} works as a {v}.",
        "What does {p} do for a living?",
        (
            "nurse",
            "carpenter",
            "pilot",
            "librarian",
            "dentist",
            "chef",
            "plumber",
            "teacher",
            "firefighter",
            "architect",
            "baker",
            "lawyer",
            "pharmacist",
            "journalist",
            "electrician",
            "veterinarian",
            "accountant",
            "translator",
            "farmer",
            "surgeon",
        ),
    ),
    "pet": (
        "{p} has a {v} at home.",
        "Does {p} keep any animals?",
        (
            "tabby cat",
            "golden retriever",
            "parrot",
            "hamster",
            "tortoise",
            "rabbit",
            "border collie",
            "goldfish",
            "ferret",
            "bearded dragon",
            "siamese cat",
            "pug",
            "canary",
            "guinea pig",
            "snake",
            "husky",
            "chinchilla",
            "gecko",
            "dachshund",
            "cockatiel",
        ),
    ),
    "hometown": (
        "{p} grew up in {v}.",
        "Where is {p} originally from?",
        (
            "Lyon",
            "Porto",
            "Kraków",
            "Osaka",
            "Valencia",
            "Tbilisi",
            "Bergen",
            "Cork",
            "Bologna",
            "Tampere",
            "Graz",
            "Izmir",
            "Leipzig",
            "Salvador",
            "Quito",
            "Tartu",
            "Bruges",
            "Malmö",
            "Sapporo",
            "Nantes",
        ),
    ),
    "instrument": (
        "{p} plays the {v}.",
        "What instrument does {p} play?",
        (
            "cello",
            "trumpet",
            "oboe",
            "banjo",
            "harp",
            "saxophone",
            "violin",
            "accordion",
            "bassoon",
            "ukulele",
            "clarinet",
            "mandolin",
            "trombone",
            "flute",
            "piano",
            "tuba",
            "sitar",
            "harmonica",
            "viola",
            "drums",
        ),
    ),
    "food": (
        "{p}'s favourite food is {v}.",
        "What dish does {p} enjoy eating most?",
        (
            "ramen",
            "lasagne",
            "paella",
            "dumplings",
            "tacos",
            "moussaka",
            "pho",
            "risotto",
            "pierogi",
            "curry",
            "sushi",
            "goulash",
            "falafel",
            "pancakes",
            "burritos",
            "gnocchi",
            "kimchi stew",
            "fish and chips",
            "biryani",
            "ceviche",
        ),
    ),
    "sport": (
        "{p} goes {v} every weekend.",
        "How does {p} keep fit?",
        (
            "swimming",
            "climbing",
            "cycling",
            "running",
            "rowing",
            "skiing",
            "surfing",
            "hiking",
            "skating",
            "kayaking",
            "sailing",
            "bouldering",
            "jogging",
            "snowboarding",
            "diving",
            "fencing",
            "golfing",
            "dancing",
            "boxing",
            "riding horses",
        ),
    ),
    "language": (
        "{p} is learning {v}.",
        "What language is {p} learning these days?",
        (
            "Japanese",
            "Portuguese",
            "Finnish",
            "Arabic",
            "Korean",
            "Dutch",
            "Greek",
            "Swahili",
            "Icelandic",
            "Turkish",
            "Polish",
            "Hindi",
            "Italian",
            "Mandarin",
            "Hebrew",
            "Czech",
            "Norwegian",
            "Vietnamese",
            "Catalan",
            "Welsh",
        ),
    ),
    "allergy": (
        "{p} is allergic to {v}.",
        "Is {p} allergic to anything?",
        (
            "peanuts",
            "shellfish",
            "pollen",
            "cats",
            "penicillin",
            "eggs",
            "strawberries",
            "bee stings",
            "dust",
            "latex",
            "milk",
            "sesame",
            "kiwi",
            "wheat",
            "soy",
            "mould",
            "walnuts",
            "celery",
            "mustard",
            "horses",
        ),
    ),
    "birthday": (
        "{p}'s birthday is on {v}.",
        "When is {p}'s birthday?",
        (
            "March 3",
            "July 14",
            "January 22",
            "October 9",
            "May 30",
            "December 1",
            "August 18",
            "April 7",
            "September 25",
            "February 11",
            "June 6",
            "November 19",
            "March 28",
            "July 2",
            "January 5",
            "October 31",
            "May 12",
            "December 24",
            "August 8",
            "April 16",
        ),
    ),
    "collection": (
        "{p} collects {v}.",
        "What does {p} collect as a hobby?",
        (
            "stamps",
            "vinyl records",
            "old coins",
            "postcards",
            "seashells",
            "comic books",
            "fountain pens",
            "board games",
            "teapots",
            "trading cards",
            "vintage cameras",
            "snow globes",
            "pressed flowers",
            "model trains",
            "rubber ducks",
            "maps",
            "matchboxes",
            "keychains",
            "minerals",
            "film posters",
        ),
    ),
}

NEAR_MISSES = (
    "{p}'s sister works as a {job}.",
    "{p}'s neighbour has a {pet}.",
    "{p}'s best friend plays the {instrument}.",
    "{p}'s cousin grew up in {hometown}.",
)

SERVER_FACTS = (
    "Movie night on the server is every Friday at eight.",
    "The server's book club is reading a novel about lighthouses.",
    "New members are welcomed in the introductions channel.",
    "The server was founded in the spring of 2021.",
    "Memes go in the memes channel, not in general.",
    "The monthly art contest theme is chosen by vote.",
    "Voice chat is busiest on Sunday evenings.",
    "The server mascot is a sleepy otter.",
    "Spoilers must be hidden behind spoiler tags.",
    "The server's game night rotates between three board games.",
    "A bot posts the word of the day every morning.",
    "The moderators meet on the first Monday of each month.",
    "Server birthdays are announced in the celebrations channel.",
    "The server has a weekly cooking challenge.",
    "Music recommendations go in the listening-room channel.",
    "The server's annual meetup takes place in a park.",
    "Polls close after forty-eight hours.",
    "Screenshots of private messages are not allowed.",
    "The server's wiki lists every running joke.",
    "The quiet hours are from midnight to seven.",
)


@dataclass(frozen=True)
class Fact:
    id: int
    person: str
    kind: str
    text: str


@dataclass(frozen=True)
class Question:
    text: str
    answer_id: int


def facts() -> list[Fact]:
    """The 200 facts (ids 1–200): person by person, one of each kind."""
    found = []
    for n, person in enumerate(PEOPLE):
        for kind, (template, _, values) in KINDS.items():
            text = template.format(p=person, v=values[n])
            found.append(Fact(len(found) + 1, person, kind, text))
    return found


def distractors() -> list[str]:
    """80 near misses (each person's relatives and neighbours, a value another person has)
    and 20 facts about the server."""
    texts = []
    for n, person in enumerate(PEOPLE):
        other = (n + 7) % len(PEOPLE)
        values = {kind: values[other] for kind, (_, _, values) in KINDS.items()}
        texts += [template.format(p=person, **values) for template in NEAR_MISSES]
    return [*texts, *SERVER_FACTS]


def questions() -> list[Question]:
    """100 questions: five per person, each a paraphrase asking for one of their facts (the
    kinds rotate so that every kind is asked ten times)."""
    by_key = {(fact.person, fact.kind): fact for fact in facts()}
    kinds = list(KINDS)
    asked = []
    for n, person in enumerate(PEOPLE):
        for j in range(5):
            kind = kinds[(n + 2 * j) % len(kinds)]
            asked.append(Question(KINDS[kind][1].format(p=person), by_key[(person, kind)].id))
    return asked
