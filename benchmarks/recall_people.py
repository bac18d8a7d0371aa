"""The end-to-end recall evaluation set, written by hand: twelve people, ten things each told
the personas about themselves (as they would type them with ``/memory add``), and fifty
questions asked in conversation in words of their own.

Each question shares no content word with the fact it asks about (`content_words`; a test
checks it, the lines it follows and the message it replies to included): "what's my dog called
again?" after "I have a border collie named Pixel". The facts were written first, person by
person, as people describe themselves; the questions afterwards, the way someone asks a friend
who should know. Several people have facts of the same kind (pets, jobs, families, food), so a
question about one person's dog has other people's dogs to be confused with, and each person's
other nine facts compete with the right one.

A question is asked in the person's own channel: ``lead`` lines first (not addressed to any
persona), then the question, addressed to Tomori; with ``reply_to`` the question is a Discord
reply to that lead line, whose words are part of what is being asked. ``CHATTER`` are
triggers that ask about nothing anyone told: what they are shown measures how much recall
shows when nothing bears on the conversation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FACTS: dict[str, dict[str, str]] = {
    "dara": {
        "job": "I teach chemistry at a secondary school.",
        "pet": "I have a border collie named Pixel, she's honestly smarter than me.",
        "home": "Grew up on a sheep farm outside Galway.",
        "hobby": "Bouldering twice a week at the Crux gym, called it my therapy.",
        "food": "Allergic to peanuts, I carry an epipen everywhere.",
        "music": "Played bass in a punk band at university.",
        "family": "My younger brother Cian is a paramedic.",
        "travel": "Spent last summer cycling across Portugal.",
        "car": "I drive an old green Volvo estate.",
        "fear": "Terrified of deep water, never learned to swim.",
    },
    "emeka": {
        "job": "I'm a nurse on the night shift at St Mary's hospital.",
        "pet": "We have two cats, Salt and Pepper.",
        "home": "Born in Lagos, moved to Manchester when I was nine.",
        "hobby": "I've been making sourdough since lockdown.",
        "sport": "Lifelong Arsenal supporter, season ticket holder.",
        "family": "My wife Ngozi and I are expecting our first baby in March.",
        "language": "I speak Yoruba with my parents.",
        "car": "I cycle everywhere, never owned a car.",
        "birthday": "My birthday is on the 14th of July.",
        "book": "My favourite novel is Things Fall Apart.",
    },
    "freya": {
        "job": "I write code for a bank's mobile app.",
        "pet": "I keep three chickens in the back garden.",
        "home": "I'm originally from a tiny island in Shetland.",
        "hobby": "I knit jumpers and sell them at craft fairs.",
        "food": "I'm vegan, have been for six years.",
        "music": "Learning the fiddle, badly.",
        "travel": "Going to Japan in April for the cherry blossoms.",
        "fear": "Spiders make me scream.",
        "family": "My twin sister Ingrid lives in Oslo.",
        "sport": "Ran my first marathon last October.",
    },
    "gus": {
        "job": "I drive a delivery van for a parcel company.",
        "pet": "My tortoise Gerald is older than I am.",
        "home": "I live on a narrowboat on the canal.",
        "hobby": "I collect vinyl records, mostly seventies soul.",
        "food": "Can't stand coriander, it tastes like soap to me.",
        "family": "My dad taught me to fish when I was little.",
        "sport": "I referee kids' rugby on Sundays.",
        "language": "Trying to learn Welsh on Duolingo.",
        "health": "Broke my left wrist skateboarding last year.",
        "drink": "Tea with three sugars, don't judge.",
    },
    "hana": {
        "job": "I'm a vet, mostly small animals.",
        "pet": "I foster kittens for the local shelter.",
        "home": "I was raised in Osaka.",
        "hobby": "I practise piano every evening.",
        "food": "Sushi is my comfort food.",
        "family": "My grandmother turns 100 next month.",
        "travel": "Backpacked through Peru after graduating.",
        "language": "Japanese, English and some Spanish.",
        "sport": "I swim laps before work.",
        "car": "My car is a red Mini.",
    },
    "ivo": {
        "job": "I'm a carpenter, I build kitchen cabinets.",
        "pet": "Our golden retriever is called Mango.",
        "home": "Moved here from Zagreb two years ago.",
        "hobby": "I brew my own beer in the garage.",
        "food": "I'm lactose intolerant.",
        "family": "Three daughters, all under ten.",
        "music": "I sing in a barbershop quartet.",
        "sport": "I support Dinamo Zagreb.",
        "fear": "I get seasick on any boat.",
        "travel": "Never been on a plane.",
    },
    "jun": {
        "job": "I'm an accountant at a small firm.",
        "pet": "I've got a corn snake named Noodle.",
        "home": "Grew up in Busan by the sea.",
        "hobby": "I build mechanical keyboards.",
        "food": "Spicy food is my weakness, the hotter the better.",
        "family": "My mum runs a restaurant.",
        "music": "I DJ at weddings on the side.",
        "sport": "I'm learning to surf.",
        "health": "I wear contact lenses, very short-sighted.",
        "travel": "Visited Iceland for the northern lights.",
    },
    "kemal": {
        "job": "I'm a pilot for a cargo airline.",
        "pet": "As a kid I had a parrot that could whistle the national anthem.",
        "home": "Born and raised in Izmir.",
        "hobby": "I restore old motorbikes.",
        "food": "I don't drink alcohol.",
        "family": "My son just started university in Berlin.",
        "music": "Big fan of Turkish psychedelic rock.",
        "sport": "Chess online every night.",
        "language": "I'm fluent in German.",
        "fear": "Hate hospitals since my surgery.",
    },
    "lena": {
        "job": "I'm a librarian at the university.",
        "pet": "Two guinea pigs, Bean and Sprout.",
        "home": "Grew up in a village near Salzburg.",
        "hobby": "I paint watercolour landscapes.",
        "food": "Coeliac, so no gluten.",
        "family": "My partner Tom is a firefighter.",
        "travel": "I've visited every capital in Europe.",
        "music": "Played the cello in a youth orchestra.",
        "sport": "Yoga every morning.",
        "car": "I don't drive, I take the tram everywhere.",
    },
    "marco": {
        "job": "I'm a chef at an Italian restaurant.",
        "pet": "I have a pug called Biscotti.",
        "home": "From Naples originally.",
        "hobby": "I fly drones and film the coast.",
        "food": "Allergic to shellfish.",
        "family": "I have four older sisters.",
        "music": "Drums in a jazz trio.",
        "sport": "Napoli fan till I die.",
        "language": "Learning Korean for fun.",
        "health": "Had knee surgery in January.",
    },
    "nadia": {
        "job": "I'm a primary school teacher.",
        "pet": "My cat Lulu is deaf.",
        "home": "Grew up in Marseille.",
        "hobby": "I run a book club.",
        "food": "I'm diabetic.",
        "family": "My brother is getting married in June.",
        "travel": "We honeymooned in Zanzibar.",
        "music": "I sing in a gospel choir.",
        "sport": "Netball on Tuesdays.",
        "language": "Arabic is my first language.",
    },
    "oskar": {
        "job": "I'm a plumber, self-employed.",
        "pet": "Our husky Storm howls at sirens.",
        "home": "I live in a flat above a bakery.",
        "hobby": "I'm into astronomy, there's a telescope on my balcony.",
        "food": "I hate mushrooms.",
        "family": "My granddad fought in the resistance.",
        "music": "Trumpet in a brass band.",
        "sport": "Training for an ironman.",
        "travel": "Drove Route 66 last year.",
        "language": "Swedish, but I grew up in Rotterdam.",
    },
}
"""person → fact kind → the fact, in that person's words."""


@dataclass(frozen=True)
class Question:
    """A question about one of ``person``'s facts, asked in their channel.

    Attributes:
        person: Who asks (the sandbox user and their channel).
        fact: Which of their facts answers it (a key of ``FACTS[person]``).
        ask: The message addressed to Tomori.
        lead: What the person says just before, addressed to no persona.
        reply_to: The index in ``lead`` of the line ``ask`` replies to, or None.
    """

    person: str
    fact: str
    ask: str
    lead: tuple[str, ...] = ()
    reply_to: int | None = None

    @property
    def fact_text(self) -> str:
        return FACTS[self.person][self.fact]


QUESTIONS: tuple[Question, ...] = (
    Question("dara", "job", "tomori, what do I do for a living again?", ("long week",)),
    Question("dara", "pet", "tomori, what's my dog called again?"),
    Question(
        "dara",
        "food",
        "tomori, is there anything on this menu I should avoid?",
        ("we're getting thai tonight, menu attached",),
        reply_to=0,
    ),
    Question("dara", "music", "tomori, what was I doing on stage back in my student days?"),
    Question("emeka", "job", "tomori, remind me, what's my job?", ("so tired",)),
    Question("emeka", "family", "tomori, when is the little one due?"),
    Question(
        "emeka",
        "sport",
        "tomori, which football club do I cheer for?",
        ("did you watch the match last night?", "what a goal"),
    ),
    Question("emeka", "birthday", "tomori, when do I turn a year older?"),
    Question("emeka", "hobby", "tomori, what have I been baking lately?"),
    Question("freya", "food", "tomori, do I eat meat?", ("bbq at ours on saturday",), reply_to=0),
    Question("freya", "travel", "tomori, where am I flying off to this spring?"),
    Question("freya", "family", "tomori, do I have any siblings?"),
    Question("freya", "sport", "tomori, what's the longest race I've ever finished?"),
    Question("gus", "home", "tomori, where's my home these days?", ("moving is such a pain",)),
    Question("gus", "hobby", "tomori, what do I dig for in second-hand shops?"),
    Question(
        "gus",
        "food",
        "tomori, which herb ruins a dish for me?",
        ("making salsa", "need to check the recipe first"),
    ),
    Question("gus", "health", "tomori, did I ever hurt my arm?"),
    Question("hana", "job", "tomori, what's my profession?"),
    Question("hana", "family", "tomori, whose big party is coming up in my family?"),
    Question("hana", "home", "tomori, which city did I spend my childhood in?"),
    Question(
        "hana",
        "sport",
        "tomori, what's my exercise routine?",
        ("i want to get in shape for summer",),
        reply_to=0,
    ),
    Question("ivo", "food", "tomori, can I have cheese?", ("pizza night!",)),
    Question("ivo", "family", "tomori, how many kids do I have?"),
    Question("ivo", "music", "tomori, what kind of vocal group am I part of?"),
    Question("ivo", "hobby", "tomori, what am I fermenting at home?"),
    Question("ivo", "travel", "tomori, have I ever flown anywhere?"),
    Question("jun", "pet", "tomori, what do I call my scaly pet?"),
    Question("jun", "health", "tomori, how bad is my eyesight?", ("can't read the board",)),
    Question("jun", "family", "tomori, what does my mother do?"),
    Question("jun", "music", "tomori, how do I earn extra cash at parties?"),
    Question("kemal", "job", "tomori, what's my line of work?"),
    Question("kemal", "family", "tomori, where is my boy studying?"),
    Question(
        "kemal",
        "food",
        "tomori, would I like a glass of wine?",
        ("it's my colleague's leaving party", "there'll be toasts"),
        reply_to=1,
    ),
    Question("kemal", "hobby", "tomori, what do I fix up in my shed?"),
    Question("lena", "food", "tomori, can I eat bread?"),
    Question("lena", "family", "tomori, what does my other half do for a job?"),
    Question("lena", "hobby", "tomori, what kind of art do I make?", ("rainy sunday",)),
    Question("lena", "car", "tomori, how do I get around town?"),
    Question("marco", "pet", "tomori, what breed is my dog?"),
    Question("marco", "food", "tomori, can I have prawns?", ("seafood platter at the party",)),
    Question("marco", "family", "tomori, how many siblings do I have?"),
    Question("marco", "health", "tomori, which joint did I have operated on?"),
    Question("nadia", "food", "tomori, should I watch my sugar?", ("cake in the staffroom",)),
    Question("nadia", "family", "tomori, whose wedding am I going to this summer?"),
    Question("nadia", "language", "tomori, what's my mother tongue?"),
    Question("nadia", "job", "tomori, what age group do I work with?"),
    Question("oskar", "hobby", "tomori, what do I do when the sky is clear at night?"),
    Question(
        "oskar",
        "food",
        "tomori, which thing should you never put on my plate?",
        ("what's for dinner",),
    ),
    Question("oskar", "pet", "tomori, what noise does my dog make?"),
    Question("oskar", "travel", "tomori, what was my big american road trip?"),
)

CHATTER: tuple[tuple[str, str], ...] = (
    ("dara", "tomori, good morning!"),
    ("emeka", "tomori, how are you today?"),
    ("freya", "tomori, lol that's so true"),
    ("gus", "tomori, thanks, that helps"),
    ("hana", "tomori, what do you think of this weather?"),
    ("ivo", "tomori, tell me a joke"),
    ("jun", "tomori, ok see you later"),
    ("kemal", "tomori, have a nice evening"),
    ("lena", "tomori, any plans for today?"),
    ("marco", "tomori, haha nice"),
    ("nadia", "tomori, you're the best"),
    ("oskar", "tomori, what's new?"),
)
"""(person, trigger) that ask about nothing anyone told the personas."""

_FUNCTION_WORDS_TEXT = """
    a about after again all am an and any are as at be been before being but by can could
    did do does doing don during each for from had has have having he her here hers him his how
    i i'm i've if in into is it it's its just me my myself no not now of off on or our ours out
    over own re s she should so some than that the their them then there these they this those
    through to too under until up very was we were what what's when where where's which while
    who whom whose why will with would you your yours t ll d m ve"""
FUNCTION_WORDS = frozenset(_FUNCTION_WORDS_TEXT.split())
"""Words that carry no content. Fixed here, apart from the product's own stop words, so that
changing what recall ignores cannot make a question count as sharing no word with its fact."""

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def content_words(text: str) -> set[str]:
    """The content words of ``text``: lowercase words less `FUNCTION_WORDS` and the persona's
    name, each cut to its first four letters, so that inflections of one word meet ("swim" and
    "swimming", "marry" and "married")."""
    words = {word for word in _WORD.findall(text.lower()) if word not in FUNCTION_WORDS}
    return {word[:4] for word in words - {"tomori"}}
