"""Text, time-series and pixel-neighbourhood tasks read from registry packages.

Text: the six novels of Jane Austen (r-cran-janeaustenr), the fortune
cookie files of Debian's `fortunes` package, the word lists of Debian's
wamerican, wfrench, wngerman, wspanish and witalian, and the Tate
collection's titles (r-cran-modeldata). Time series: R's `datasets`
(r-base-core), modeldata's Chicago ridership and beverage sales, ggplot2's
Texas housing sales. Pixel neighbourhoods: mlbench's Landsat satellite
data. Regenerating them needs those packages (`apt-get install r-base-core
r-cran-janeaustenr r-cran-modeldata r-cran-ggplot2 r-cran-mlbench fortunes
wamerican wfrench wngerman wspanish witalian`); nothing else in mlerl does.

Graph tasks stay synthetic (generate.py's stochastic block models): no
registry package here ships a real labelled graph larger than a few dozen
nodes.
"""
import os
import re

import numpy as np
import pandas as pd

from gen_common import r_dataset, series_split, split_idx, task, write_split
from gen_tabular import LICENCES, r_frame

# ---------------------------------------------------------------- text

NOVELS = [("sensesensibility", "sense_and_sensibility"), ("prideprejudice", "pride_and_prejudice"),
          ("mansfieldpark", "mansfield_park"), ("emma", "emma"), ("northangerabbey", "northanger_abbey"),
          ("persuasion", "persuasion")]


def passages(lines, words_per):
    """Consecutive passages of about words_per words from a novel's lines,
    skipping chapter and volume headings."""
    out, cur = [], []
    for line in lines:
        line = str(line).strip()
        if not line or re.match(r"^(CHAPTER|Chapter|VOLUME|Volume)\b", line):
            continue
        cur += line.split()
        if len(cur) >= words_per:
            out.append(" ".join(cur))
            cur = []
    return out


@task("austen-novel", title="Which Jane Austen novel a passage comes from",
      modality="text", task_type="multiclass-classification", metric="f1_macro", direction="higher",
      pred_columns=["novel"], split="rule", script={"kind": "text"},
      source="janeaustenr::sensesensibility, prideprejudice, mansfieldpark, emma, northangerabbey, persuasion "
      "(a seeded 250 passages of about 40 words per novel)",
      licence="MIT (R package janeaustenr; the novels are in the public domain, Project Gutenberg texts)",
      cite="Austen (1811-1817), six novels; Silge (2017), janeaustenr: Jane Austen's Complete Novels.",
      about="Each row is a passage of about 40 consecutive words from one of Jane Austen's six completed novels. Predict "
      "the novel: sense_and_sensibility, pride_and_prejudice, mansfield_park, emma, northanger_abbey or persuasion. "
      "Character names give some passages away; many passages name nobody.")
def austen_novel():
    rng = np.random.RandomState(201)
    rows = []
    for obj, label in NOVELS:
        df = r_dataset("janeaustenr", obj)
        ps = passages(df["x"].tolist(), 40)
        for i in sorted(rng.choice(len(ps), size=250, replace=False)):
            rows.append((ps[i], label))
    df = pd.DataFrame(rows, columns=["text", "novel"]).sample(frac=1.0, random_state=201).reset_index(drop=True)
    return write_split(df, ["novel"], split_idx(len(df), 201, (0.5, 0.2), stratify=df["novel"]))


FORTUNES = "/usr/share/games/fortunes"


def fortunes(name):
    """The quotes of one fortune file, each on one line (whitespace collapsed)."""
    path = os.path.join(FORTUNES, name)
    if not os.path.exists(path):
        raise SystemExit("%s not found: regenerating the fortune tasks needs `apt-get install fortunes`" % path)
    with open(path, encoding="latin-1") as f:
        text = f.read()
    out = []
    for q in text.split("\n%\n"):
        q = " ".join(q.replace("%", " ").split())
        if 20 <= len(q) <= 600:
            out.append(q)
    return out


FORTUNE_TOPICS = ["art", "food", "law", "politics", "science", "work"]


@task("fortune-topic", title="The topic file of a fortune-cookie quote",
      modality="text", task_type="multiclass-classification", metric="f1_macro", direction="higher",
      pred_columns=["topic"], split="rule", script={"kind": "text"},
      source="Debian package fortunes: /usr/share/games/fortunes/{art,food,law,politics,science,work} (quotes of 20 to 600 characters)",
      licence="BSD-4-Clause (fortune-mod, Debian's fortunes package; the quotes are by their many authors)",
      cite="The BSD fortune(6) databases, as packaged by Debian (fortunes 1.99.1).",
      about="Each row is a quotation, joke or aphorism from the fortune-cookie databases of BSD Unix. Predict the database "
      "it is filed in: art, food, law, politics, science or work. The databases are of unequal size and many quotes are "
      "ironic.")
def fortune_topic():
    rows = [(q, t) for t in FORTUNE_TOPICS for q in fortunes(t)]
    df = pd.DataFrame(rows, columns=["text", "topic"]).drop_duplicates("text")
    df = df.sample(frac=1.0, random_state=202).reset_index(drop=True)
    return write_split(df, ["topic"], split_idx(len(df), 202, (0.5, 0.2), stratify=df["topic"]))


@task("fortune-computing", title="Is a fortune-cookie quote about computing",
      modality="text", task_type="binary-classification", metric="roc_auc", direction="higher",
      pred_columns=["computing"], split="rule", script={"kind": "text"},
      source="Debian package fortunes: computers and linux (computing) against a seeded 2,000 of people, platitudes, wisdom, "
      "songs-poems and miscellaneous",
      licence="BSD-4-Clause (fortune-mod, Debian's fortunes package; the quotes are by their many authors)",
      cite="The BSD fortune(6) databases, as packaged by Debian (fortunes 1.99.1).",
      about="Each row is a quotation or joke from the fortune-cookie databases of BSD Unix. Predict the probability that it "
      "comes from the computing databases (computers, linux) rather than from general ones (people, platitudes, wisdom, "
      "songs and poems, miscellaneous).")
def fortune_computing():
    rng = np.random.RandomState(203)
    pos = [q for t in ("computers", "linux") for q in fortunes(t)]
    neg = [q for t in ("people", "platitudes", "wisdom", "songs-poems", "miscellaneous") for q in fortunes(t)]
    neg = [neg[i] for i in sorted(rng.choice(len(neg), size=2000, replace=False))]
    df = pd.DataFrame({"text": pos + neg, "computing": [1] * len(pos) + [0] * len(neg)}).drop_duplicates("text")
    df = df.sample(frac=1.0, random_state=203).reset_index(drop=True)
    return write_split(df, ["computing"], split_idx(len(df), 203, (0.5, 0.2), stratify=df["computing"]))


WORDLISTS = [("american-english", "english"), ("french", "french"), ("ngerman", "german"), ("spanish", "spanish"),
             ("italian", "italian")]


@task("word-language", title="The language of a single word",
      modality="text", task_type="multiclass-classification", metric="accuracy", direction="higher",
      pred_columns=["language"], split="rule", script={"kind": "text"},
      source="Debian word lists /usr/share/dict/{american-english,french,ngerman,spanish,italian} (a seeded 900 lower-case "
      "words per language, words found in two lists dropped)",
      licence="wamerican: SCOWL's permissive licence; wfrench, wngerman, wspanish, witalian: GPL-2 (Debian packages)",
      cite="Atkinson, SCOWL (Spell Checker Oriented Word Lists); the ispell/hunspell dictionaries packaged by Debian.",
      about="Each row is one word from a spelling dictionary. Predict its language: english, french, german, spanish or "
      "italian. Words are single tokens, so what distinguishes them is spelling: letters, endings and accents.")
def word_language():
    rng = np.random.RandomState(204)
    lists = {}
    for fname, lang in WORDLISTS:
        path = os.path.join("/usr/share/dict", fname)
        if not os.path.exists(path):
            raise SystemExit("%s not found: regenerating word-language needs `apt-get install wamerican wfrench wngerman "
                             "wspanish witalian`" % path)
        with open(path, encoding="utf-8", errors="replace") as f:
            words = {w.strip() for w in f}
        lists[lang] = {w for w in words if re.fullmatch(r"[^\W\d_]{3,}", w) and w == w.lower()}
    seen = {}
    for lang, ws in lists.items():
        for w in ws:
            seen[w] = seen.get(w, 0) + 1
    rows = []
    for _, lang in WORDLISTS:
        ws = sorted(w for w in lists[lang] if seen[w] == 1)
        for i in sorted(rng.choice(len(ws), size=900, replace=False)):
            rows.append((ws[i], lang))
    df = pd.DataFrame(rows, columns=["text", "language"]).sample(frac=1.0, random_state=204).reset_index(drop=True)
    return write_split(df, ["language"], split_idx(len(df), 204, (0.5, 0.2), stratify=df["language"]))


def tate_medium_class(m):
    m = str(m).lower()
    if "photograph" in m:
        return "photograph"
    if re.search(r"video|film|projection|slide", m):
        return "moving_image"
    if re.search(r"etching|screenprint|lithograph|woodcut|aquatint|drypoint|engraving|linocut|print", m):
        return "print"
    if re.search(r"paint|oil|acrylic", m):
        return "painting"
    if re.search(r"graphite|pencil|ink|charcoal|watercolour|gouache|crayon|chalk", m):
        return "drawing"
    return None


@task("tate-medium", title="The medium of a work in the Tate collection from its artist and title",
      modality="text", task_type="multiclass-classification", metric="f1_macro", direction="higher",
      pred_columns=["medium"], split="rule", script={"kind": "text"},
      source="modeldata::tate_text (works whose medium falls in one of five groups; the medium grouped by keywords)",
      licence="MIT (R package modeldata); Tate collection metadata released by Tate under CC0",
      cite="Tate (2014), collection metadata (github.com/tategallery/collection), as distributed with modeldata (tate_text).",
      about="Each row is a work acquired by Tate, as 'artist: title' (works made 1990-2012). Predict the medium group of "
      "the work: print, photograph, painting, drawing or moving_image. Artists tend to keep to a medium; titles say little.")
def tate_medium():
    df = r_frame("modeldata", "tate_text")
    df["medium"] = df["medium"].map(tate_medium_class)
    df = df[df["medium"].notna()].reset_index(drop=True)
    out = pd.DataFrame({"text": df["artist"].astype(str) + ": " + df["title"].astype(str), "medium": df["medium"]})
    return write_split(out, ["medium"], split_idx(len(out), 205, (0.5, 0.2), stratify=out["medium"]))


# ---------------------------------------------------------------- time series


def monthly(package, name, target, value="value"):
    """A monthly R time series as date (YYYY-MM), t (steps from the first) and target."""
    d = r_dataset(package, name)
    years = np.floor(d["time"].to_numpy() + 1e-6).astype(int)
    months = np.round((d["time"].to_numpy() - years) * 12).astype(int) + 1
    return pd.DataFrame({"date": ["%04d-%02d" % (y, m) for y, m in zip(years, months)], "t": range(len(d)),
                         target: d[value].to_numpy()})


def series_task(id, title, source, licence, cite, about, target, metric, period, n_valid, n_test, build, seed_note=""):
    task(id, title=title, modality="time-series", task_type="forecasting", metric=metric, direction="lower",
         pred_columns=[target], split="rule", about=about,
         script={"kind": "series", "period": period, "horizon": n_valid + n_test},
         source=source, licence=licence, cite=cite)(lambda: series_split(build(), target, n_valid, n_test))


series_task("air-passengers", "Forecast monthly international airline passengers", "datasets::AirPassengers",
            LICENCES["datasets"], "Box, Jenkins and Reinsel (1976), Time Series Analysis, Forecasting and Control, Series G.",
            "Monthly totals of international airline passengers (thousands), 1949-1960; `t` counts months from January "
            "1949. The seasonal swing grows with the level. Validation covers the 2 years after the training history; the "
            "test rows are the 2 years after validation. Forecast the passengers of every test month.",
            "passengers", "mae", 12, 24, 24, lambda: monthly("datasets", "AirPassengers", "passengers"))

series_task("uk-driver-deaths", "Forecast monthly UK car drivers killed or seriously injured", "datasets::UKDriverDeaths",
            LICENCES["datasets"], "Harvey and Durbin (1986), The effects of seat belt legislation on British road casualties, "
            "JRSS A 149.",
            "Monthly totals of car drivers in Great Britain killed or seriously injured, 1969-1984; `t` counts months from "
            "January 1969. Wearing seat belts became compulsory on 31 January 1983. Validation covers the 2 years after the "
            "training history; the test rows are the 2 years after validation. Forecast every test month.",
            "deaths", "rmse", 12, 24, 24, lambda: monthly("datasets", "UKDriverDeaths", "deaths"))

series_task("nottingham-temperature", "Forecast monthly air temperature at Nottingham Castle", "datasets::nottem",
            LICENCES["datasets"], "Anderson (1976), Time Series Analysis and Forecasting: The Box-Jenkins Approach.",
            "Average monthly air temperature (degrees Fahrenheit) at Nottingham Castle, 1920-1939; `t` counts months from "
            "January 1920. Validation covers the 2 years after the training history; the test rows are the 3 years after "
            "validation. Forecast every test month.",
            "temperature", "mae", 12, 24, 36, lambda: monthly("datasets", "nottem", "temperature"))


def yearly(package, name, target):
    d = r_dataset(package, name)
    return pd.DataFrame({"year": d["time"].round().astype(int), "t": range(len(d)), target: d["value"].to_numpy()})


series_task("lynx-trappings", "Forecast yearly Canadian lynx trappings", "datasets::lynx", LICENCES["datasets"],
            "Elton and Nicholson (1942), The ten-year cycle in numbers of the lynx in Canada, Journal of Animal Ecology 11.",
            "Yearly numbers of lynx trapped in the Mackenzie River district of north-west Canada, 1821-1934; `t` counts "
            "years from 1821. The series cycles roughly every 9 to 10 years. Validation covers the 14 years after the "
            "training history; the test rows are the 20 years after validation. Forecast every test year.",
            "lynx", "rmse", 9.6, 14, 20, lambda: yearly("datasets", "lynx", "lynx"))


def quarterly(package, name, target):
    d = r_dataset(package, name)
    years = np.floor(d["time"].to_numpy() + 1e-6).astype(int)
    q = np.round((d["time"].to_numpy() - years) * 4).astype(int) + 1
    return pd.DataFrame({"quarter": ["%04dQ%d" % (y, k) for y, k in zip(years, q)], "t": range(len(d)),
                         target: d["value"].to_numpy()})


series_task("uk-gas", "Forecast quarterly UK gas consumption", "datasets::UKgas", LICENCES["datasets"],
            "Durbin and Koopman (2001), Time Series Analysis by State Space Methods.",
            "Quarterly UK gas consumption (millions of therms), 1960-1986; `t` counts quarters from 1960 Q1. The seasonal "
            "swing grows with the level. Validation covers the 2 years after the training history; the test rows are the "
            "4 years after validation. Forecast every test quarter.",
            "gas", "mae", 4, 8, 16, lambda: quarterly("datasets", "UKgas", "gas"))


def drinks():
    d = r_frame("modeldata", "drinks")
    return pd.DataFrame({"date": d["date"].astype(str).str[:7], "t": range(len(d)), "sales": d["s4248_sm144_ncen"].to_numpy()})


series_task("liquor-sales", "Forecast monthly US beer, wine and liquor sales", "modeldata::drinks", LICENCES["modeldata"],
            "US Census Bureau, Advance Monthly Retail Sales, series S4248SM144NCEN (beer, wine and distilled alcoholic "
            "beverages merchant wholesalers), as distributed with modeldata (drinks).",
            "Monthly sales of beer, wine and liquor wholesalers in the US (millions of dollars, not seasonally adjusted), "
            "1992-2017; `t` counts months from January 1992. Validation covers the 2 years after the training history; the "
            "test rows are the 2 years after validation. Forecast every test month.",
            "sales", "mae", 12, 24, 24, drinks)


def houston():
    d = r_frame("ggplot2", "txhousing")
    d = d[d["city"] == "Houston"].reset_index(drop=True)
    return pd.DataFrame({"date": ["%04d-%02d" % (y, m) for y, m in zip(d["year"], d["month"])], "t": range(len(d)),
                         "sales": d["sales"].to_numpy()})


series_task("houston-home-sales", "Forecast monthly home sales in Houston", "ggplot2::txhousing (city Houston)",
            LICENCES["ggplot2"], "Texas A&M Real Estate Center (2015), Texas housing data, as distributed with ggplot2 "
            "(txhousing).",
            "Monthly number of home sales in Houston, Texas, 2000-2015; `t` counts months from January 2000. Validation "
            "covers the 18 months after the training history; the test rows are the 18 months after validation. Forecast "
            "every test month.",
            "sales", "mae", 12, 18, 18, houston)


def chicago():
    d = r_frame("modeldata", "Chicago")
    return pd.DataFrame({"date": d["date"].astype(str), "t": range(len(d)), "temp": d["temp"], "percip": d["percip"],
                         "weather_snow": d["weather_snow"].round(4), "ridership": d["ridership"].round(4)})


series_task("chicago-ridership", "Forecast daily train ridership at Chicago's Clark/Lake station", "modeldata::Chicago",
            LICENCES["modeldata"], "Kuhn and Johnson (2019), Feature Engineering and Selection, chapter 1; Chicago Transit "
            "Authority ridership data, as distributed with modeldata (Chicago).",
            "Daily entries (thousands) at the Clark/Lake 'L' station in Chicago, January 2001 to August 2016, with the day's "
            "temperature, precipitation and share of snowy hours; `t` counts days from the first. Weekdays and weekends "
            "differ a lot, and holidays are low. Validation covers the year after the training history; the test rows are "
            "the year after validation. Forecast the ridership of every test day.",
            "ridership", "mae", 7, 365, 365, chicago)


# ---------------------------------------------------------------- pixel neighbourhoods

SAT_CLASSES = {"red soil": "red_soil", "cotton crop": "cotton_crop", "grey soil": "grey_soil",
               "damp grey soil": "damp_grey_soil", "vegetation stubble": "vegetation_stubble",
               "very damp grey soil": "very_damp_grey_soil"}


@task("satellite-landcover", title="Land cover from Landsat pixel neighbourhoods",
      modality="image", task_type="multiclass-classification", metric="accuracy", direction="higher",
      pred_columns=["cover"], split="rule", script={"kind": "pixels", "model": "nb", "side": 3, "max": 255},
      source="mlbench::Satellite (columns reordered band-major)", licence=LICENCES["mlbench"],
      cite="Srinivasan (1993), Statlog (Landsat Satellite), UCI Machine Learning Repository; Australian Centre for "
      "Remote Sensing.",
      about="Each row is a 3x3 neighbourhood of pixels of a Landsat multi-spectral scanner image: 4 spectral bands (two "
      "visible, two near infra-red) for each of the 9 pixels, values 0..255. Columns b1_r1c1..b1_r3c3 are band 1's 3x3 "
      "pixels (row-major), then band 2, 3 and 4. Predict the land cover of the central pixel: red_soil, cotton_crop, "
      "grey_soil, damp_grey_soil, vegetation_stubble or very_damp_grey_soil.")
def satellite():
    d = r_frame("mlbench", "Satellite")
    cols = {}
    for band in range(4):
        for p in range(9):
            cols["b%d_r%dc%d" % (band + 1, p // 3 + 1, p % 3 + 1)] = d["x_%d" % (p * 4 + band + 1)].astype(int)
    df = pd.DataFrame(cols)
    df["cover"] = d["classes"].map(SAT_CLASSES)
    return write_split(df, ["cover"], split_idx(len(df), 206, (0.5, 0.2), stratify=df["cover"]))
