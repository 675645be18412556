"""Tabular tasks read from Debian's R packages (through Rscript).

Each task is one declaration of `tab(...)`: the R package and data set, the
target, the task type and metric, the weak initial model and how it copes
with the data (string columns, missing values), and the source, licence and
citation that tasks/README.md lists. The data stays as it comes: real
missing values, string categoricals, skewed targets and class imbalance.
Large sets are subsampled (seeded) to at most 12,000 rows so that an edit
runs within the time limit on one core; the note says where.

Regenerating needs `apt-get install r-base-core` and the r-cran-* package
named in each declaration (mlbench, modeldata, aer, cardata, kernlab,
ggplot2); nothing else in mlerl needs R.
"""
import re

import numpy as np

from gen_common import r_dataset, split_idx, task, write_split

LICENCES = {
    "mlbench": "GPL-2 (R package mlbench; the data sets come from the UCI repository)",
    "modeldata": "MIT (R package modeldata)",
    "AER": "GPL-2 | GPL-3 (R package AER)",
    "carData": "GPL-2 | GPL-3 (R package carData)",
    "kernlab": "GPL-2 (R package kernlab)",
    "ggplot2": "MIT (R package ggplot2)",
    "datasets": "GPL-2 | GPL-3 (R's datasets package, part of r-base-core)",
}


def snake(c):
    c = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(c))
    return re.sub(r"[^a-z0-9]+", "_", c.lower()).strip("_")


def r_frame(package, name):
    """The data set with snake_case columns and no R row names."""
    df = r_dataset(package, name)
    if "rownames" in df.columns:
        df = df.drop(columns=["rownames"])
    names, seen = [], {}
    for c in df.columns:  # R keeps case apart (Sc.Var.Maxis, Sc.Var.maxis): number repeats
        n = snake(c)
        seen[n] = seen.get(n, 0) + 1
        names.append(n if seen[n] == 1 else "%s_%d" % (n, seen[n]))
    df.columns = names
    return df


def tab(id, title, package, name, target, task_type, metric, direction, model, about, cite,
        positive=None, drop=(), n=None, seed=0, fracs=(0.6, 0.2), missing=None, prep=None, time_limit=60, note=""):
    """Registers a tabular task read from `package::name`.

    target: the (snake_case) column to predict, renamed to itself; positive:
    for a binary task, the value that becomes 1 (the rest 0); drop: columns
    removed (leaks, ids); n: seeded subsample size; prep: a function applied
    to the frame first; missing: "fill" when the initial model cannot take
    NaN (the script fills -1), None when it can or there is none."""

    def build():
        df = r_frame(package, name)
        if prep is not None:
            df = prep(df)
        df = df.drop(columns=list(drop))
        if n is not None and len(df) > n:
            df = df.sample(n=n, random_state=seed).reset_index(drop=True)
        y = df.pop(target)
        if positive is not None:
            y = (y.astype(str) == str(positive)).astype(int)
        df[target] = y
        for c in df.columns:
            if df[c].dtype.kind == "f":
                df[c] = df[c].round(6)
        strat = df[target] if task_type in ("binary-classification", "multiclass-classification") else None
        return write_split(df, [target], split_idx(len(df), seed, fracs, stratify=strat))

    strings = True
    task(id, title=title, modality="tabular", task_type=task_type, metric=metric, direction=direction,
         pred_columns=[target], split="rule", about=about,
         script={"kind": "tabular", "model": model, "strings": strings, "missing": missing},
         source="%s::%s%s" % (package, name, (" (" + note + ")") if note else ""), licence=LICENCES[package], cite=cite,
         time_limit_s=time_limit)(build)


# ---------------------------------------------------------------- binary

tab("sonar-mines", "Mines or rocks from sonar returns", "mlbench", "Sonar", "class", "binary-classification", "accuracy",
    "higher", "tree2", seed=101, positive="M",
    about="Each row is a sonar return bounced off a metal cylinder (a mine) or a rock: 60 energies in frequency bands "
    "(v1..v60, each in [0, 1]). Predict class: 1 = mine, 0 = rock.",
    cite="Gorman and Sejnowski (1988), Analysis of hidden units in a layered network trained to classify sonar targets, Neural Networks 1.")

tab("ionosphere-radar", "Good or bad radar returns from the ionosphere", "mlbench", "Ionosphere", "class", "binary-classification",
    "accuracy", "higher", "nb", seed=102, positive="good", drop=("v2",),
    about="Each row is a radar return from the ionosphere (Goose Bay, Labrador): 33 attributes of the complex autocorrelation "
    "function (v1 is a 0/1 factor). Predict class: 1 = good (structure in the ionosphere), 0 = bad.",
    cite="Sigillito, Wing, Hutton and Baker (1989), Classification of radar returns from the ionosphere using neural networks, "
    "Johns Hopkins APL Technical Digest 10.")

tab("pima-diabetes", "Diabetes in Pima women, with the missing measurements left missing", "mlbench", "PimaIndiansDiabetes2",
    "diabetes", "binary-classification", "roc_auc", "higher", "hgb", seed=103, positive="pos",
    about="Each row is a woman of Pima heritage, 21 or older: pregnancies, plasma glucose, diastolic blood pressure, triceps "
    "skinfold, 2-hour serum insulin, body-mass index, diabetes pedigree function and age. Impossible zeros of the original "
    "data are recorded as missing (empty), a lot of them for insulin and skinfold. Predict the probability of diabetes.",
    cite="Smith et al. (1988), Using the ADAP learning algorithm to forecast the onset of diabetes mellitus, Proc. Symp. "
    "Computer Applications in Medical Care; National Institute of Diabetes and Digestive and Kidney Diseases.")

tab("credit-default", "Good or bad credit from a loan application", "modeldata", "credit_data", "status", "binary-classification",
    "roc_auc", "higher", "tree2", seed=104, positive="bad", missing="fill",
    about="Each row is a loan application of a Spanish bank: seniority, home ownership, loan time, age, marital status, "
    "records, job type, expenses, income, assets, debt, loan amount and the price of the good bought; some values are "
    "missing. Predict the probability that the credit turned bad (status 1).",
    cite="Kuhn and Johnson, modeldata; credit data from the book 'Analisis multivariante' (Perez, 2007), as distributed "
    "with modeldata.")

tab("telco-churn", "Customer churn of a telecom company", "modeldata", "wa_churn", "churn", "binary-classification", "roc_auc",
    "higher", "tree2", seed=105, positive="Yes", missing="fill",
    about="Each row is a customer of a telecom company (IBM's Watson Analytics sample): demographics, tenure in months, the "
    "services they have (phone, internet, security, streaming...), contract, billing and payment method, monthly and total "
    "charges (missing for a few new customers). Predict the probability that the customer left (churn 1).",
    cite="IBM Watson Analytics sample data 'Telco customer churn', as distributed with modeldata (wa_churn).")

tab("employee-attrition", "Employee attrition", "modeldata", "attrition", "attrition", "binary-classification", "roc_auc",
    "higher", "nb", seed=106, positive="Yes",
    about="Each row is an employee of a fictional company created by IBM data scientists: age, travel, department, "
    "education, satisfaction ratings (as words), job role, income, overtime, years at the company and more. About one "
    "in six left. Predict the probability of attrition (1 = left).",
    cite="IBM HR Analytics Employee Attrition & Performance sample data, as distributed with modeldata (attrition).")

tab("mortgage-denial", "Mortgage application denials in Boston", "AER", "HMDA", "deny", "binary-classification", "roc_auc",
    "higher", "tree2", seed=107, positive="yes",
    about="Each row is a mortgage application in the Boston area (1990, Home Mortgage Disclosure Act data): payments to "
    "income, housing expense to income and loan to value ratios, consumer and mortgage credit scores, public bad credit "
    "record, unemployment rate of the applicant's industry, self-employment, mortgage insurance denial, condominium, race, "
    "single, high school diploma. Predict the probability that the mortgage was denied.",
    cite="Munnell, Tootell, Browne and McEneaney (1996), Mortgage lending in Boston: interpreting HMDA data, American "
    "Economic Review 86; Stock and Watson (2007), Introduction to Econometrics.")

tab("titanic-survival", "Survival of Titanic passengers", "carData", "TitanicSurvival", "survived", "binary-classification",
    "accuracy", "higher", "logreg", seed=108, positive="yes", missing="fill",
    about="Each row is a passenger of the Titanic: sex, age in years (missing for about a fifth) and passenger class. "
    "Predict survived: 1 = survived, 0 = died.",
    cite="Harrell (1999), Titanic passenger data; carData (Fox and Weisberg).")

tab("spam-email", "Spam e-mail from word and character frequencies", "kernlab", "spam", "type", "binary-classification",
    "accuracy", "higher", "tree2", seed=109, positive="spam",
    about="Each row is an e-mail received at Hewlett-Packard labs: frequencies of 48 words and 6 characters (percent of the "
    "message) and three statistics of runs of capital letters. Predict type: 1 = spam, 0 = legitimate.",
    cite="Hopkins, Reeber, Forman and Suermondt (1999), Spambase, UCI Machine Learning Repository; kernlab (Karatzoglou et al.).")

tab("lending-default", "Bad loans of Lending Club", "modeldata", "lending_club", "class", "binary-classification", "roc_auc",
    "higher", "tree2", seed=110, positive="bad",
    about="Each row is a Lending Club loan issued in the first quarter of 2016: amount, term, interest rate, sub-grade, "
    "state, income and its verification, employment length, delinquencies, credit inquiries, utilisation and instalment "
    "accounts. Only about 5% of loans are bad. Predict the probability that the loan is bad.",
    cite="Lending Club loan data (2016 Q1), as distributed with modeldata (lending_club).")

tab("well-switching", "Bangladeshi households switching away from arsenic wells", "carData", "Wells", "switch",
    "binary-classification", "log_loss", "lower", "nb", seed=111, positive="yes",
    about="Each row is a household in Araihazar, Bangladesh, whose well was tested for arsenic: the well's arsenic level "
    "(hundreds of micrograms per litre), the distance to the nearest safe well (metres), the head of household's years of "
    "education and whether anyone is in a community association. Predict the probability that the household switched wells.",
    cite="Gelman and Hill (2007), Data Analysis Using Regression and Multilevel/Hierarchical Models; carData (Wells).")

# ---------------------------------------------------------------- multiclass

tab("glass-type", "Type of glass from its chemistry", "mlbench", "Glass", "type", "multiclass-classification", "f1_macro",
    "higher", "tree2", seed=121, fracs=(0.5, 0.25),
    about="Each row is a glass fragment from a forensic collection: refractive index and the weight percent of Na, Mg, Al, "
    "Si, K, Ca, Ba and Fe. Predict the type (1, 2, 3, 5, 6, 7: building windows float / non-float, vehicle windows, "
    "containers, tableware, headlamps); the classes are very unequal.",
    cite="German (1987), Glass Identification, UCI Machine Learning Repository; Evett and Spiehler (1987).")

tab("vehicle-silhouettes", "Vehicle type from silhouette features", "mlbench", "Vehicle", "class", "multiclass-classification",
    "accuracy", "higher", "tree2", seed=122,
    about="Each row is the silhouette of a toy vehicle seen from some angle: 18 shape features (compactness, circularity, "
    "moments, ...). Predict the vehicle: bus, opel, saab or van.",
    cite="Siebert (1987), Vehicle recognition using rule based methods, Turing Institute; UCI Statlog (Vehicle Silhouettes).")

tab("soybean-disease", "Soybean disease from plant observations", "mlbench", "Soybean", "class", "multiclass-classification",
    "accuracy", "higher", "nb", seed=123, fracs=(0.5, 0.2), missing="fill",
    prep=lambda df: df[df.groupby("class")["class"].transform("size") >= 10],
    note="classes with fewer than 10 plants dropped",
    about="Each row is a soybean plant described by 35 categorical observations (date, weather, leaves, stem, fruit, "
    "seeds, roots, coded as small integers); many are missing, whole groups of them for some diseases. Predict the "
    "disease (15 classes).",
    cite="Michalski and Chilausky (1980), Learning by being told and learning from examples, International Journal of "
    "Policy Analysis and Information Systems 4; UCI Soybean (Large).")

tab("dna-splice", "Splice junctions in primate DNA", "mlbench", "DNA", "class", "multiclass-classification", "accuracy",
    "higher", "nb", seed=124,
    about="Each row is a window of 60 nucleotides of primate DNA around a possible splice junction, each nucleotide coded "
    "as 3 binary indicators (v1..v180). Predict the class: ei (exon/intron boundary), ie (intron/exon) or n (neither).",
    cite="Noordewier, Towell and Shavlik (1991), Training knowledge-based neural networks to recognize genes in DNA "
    "sequences, NIPS 3; UCI/Statlog DNA.")

tab("chile-vote", "Vote intention in the 1988 Chilean plebiscite", "carData", "Chile", "vote", "multiclass-classification",
    "accuracy", "higher", "tree2", seed=125, missing="fill",
    prep=lambda df: df[df["vote"].notna()],
    note="respondents without a recorded intention dropped",
    about="Each row is a respondent of a 1988 survey (FLACSO/Chile) before the plebiscite on Pinochet's rule: region, "
    "population of their community, sex, age, education, income and a scale of support for the status quo. Predict the "
    "intended vote: Y (yes), N (no), U (undecided) or A (abstain).",
    cite="FLACSO/Chile (1988) national survey; Fox (2008), Applied Regression Analysis; carData (Chile).")

tab("income-bracket", "Household income bracket from a marketing survey", "kernlab", "income", "income",
    "multiclass-classification", "accuracy", "higher", "tree2", seed=126, missing="fill",
    prep=lambda df: df.assign(income=df["income"].map(lambda s: "lt_" + re.sub(r"[^0-9]", "", s.split("-")[-1]) if isinstance(s, str) else s)),
    about="Each row is a shopping-mall survey respondent in the San Francisco Bay Area (1987): sex, marital status, age "
    "band, education, occupation, years in the area, dual incomes, household size, children under 18, householder "
    "status, home type, ethnic class and language (strings; some missing). Predict the household's annual income bracket "
    "(9 brackets, named by their upper bound in dollars).",
    cite="Impact Resources (1987), marketing survey; Hastie, Tibshirani and Friedman, The Elements of Statistical Learning; "
    "kernlab (income).")

tab("vowel-recognition", "Spoken British English vowels", "mlbench", "Vowel", "class", "multiclass-classification", "accuracy",
    "higher", "nb", seed=127,
    about="Each row is one utterance of one of 11 British English vowels (in h_d words) by one of 15 speakers: the speaker "
    "id (v1) and 10 log-area-ratio features of the speech signal (v2..v11). Predict the vowel.",
    cite="Deterding (1989), Speaker normalisation for automatic speech recognition, PhD thesis, University of Cambridge; "
    "UCI Connectionist Bench (Vowel Recognition).")

tab("hpc-job-class", "Run-time class of high-performance computing jobs", "modeldata", "hpc_data", "class",
    "multiclass-classification", "f1_macro", "higher", "tree2", seed=128,
    about="Each row is a job submitted to a Pfizer high-performance computing cluster: protocol, number of compounds, "
    "input fields, iterations, jobs pending, hour and day of submission. Predict the run-time class: VF (very fast), F, M "
    "or L (long); long jobs are rare.",
    cite="Kuhn and Johnson (2013), Applied Predictive Modeling, chapter 17; modeldata (hpc_data).")

tab("letter-recognition", "Capital letters from statistical features of their images", "mlbench", "LetterRecognition",
    "lettr", "multiclass-classification", "accuracy", "higher", "tree2", seed=129, n=8000,
    note="a seeded 8,000 of the 20,000 rows",
    about="Each row is a black-and-white image of a capital letter (20 fonts, randomly distorted), summarised by 16 integer "
    "statistics (box position and size, pixel counts, moments and edge counts, each 0..15). Predict the letter.",
    cite="Frey and Slate (1991), Letter recognition using Holland-style adaptive classifiers, Machine Learning 6.")

# ---------------------------------------------------------------- regression

tab("ames-house-prices", "Sale prices of houses in Ames, Iowa", "modeldata", "ames", "sale_price", "regression", "mae", "lower",
    "reg-tree2", seed=131,
    about="Each row is a house sold in Ames, Iowa, 2006-2010: 73 descriptors of the lot, building, quality, rooms, garage, "
    "basement and sale (many as strings). Predict the sale price in dollars (a skewed target).",
    cite="De Cock (2011), Ames, Iowa: alternative to the Boston housing data, Journal of Statistics Education 19; "
    "modeldata (ames).")

tab("concrete-strength", "Compressive strength of concrete", "modeldata", "concrete", "compressive_strength", "regression",
    "rmse", "lower", "reg-linear", seed=132,
    about="Each row is a concrete mixture: kilograms per cubic metre of cement, blast furnace slag, fly ash, water, "
    "superplasticizer, coarse and fine aggregate, and its age in days. Predict the compressive strength (MPa).",
    cite="Yeh (1998), Modeling of strength of high performance concrete using artificial neural networks, Cement and "
    "Concrete Research 28.")

tab("diamond-prices", "Prices of diamonds", "ggplot2", "diamonds", "price", "regression", "rmse", "lower", "reg-tree2",
    seed=133, n=12000, note="a seeded 12,000 of the 53,940 rows",
    about="Each row is a diamond: carat, cut, colour and clarity grades (strings), depth and table percentages and the x, "
    "y, z dimensions in mm. Predict the price in US dollars (a skewed target).",
    cite="Wickham (2016), ggplot2: Elegant Graphics for Data Analysis (diamonds data).")

tab("cps-wages", "Weekly wages in the 1988 Current Population Survey", "AER", "CPS1988", "wage", "regression", "mae", "lower",
    "reg-linear", seed=134, n=12000, note="a seeded 12,000 of the 28,155 rows",
    about="Each row is a man aged 18-70 with positive earnings in the March 1988 Current Population Survey: years of "
    "education and of experience, ethnicity, whether he lives in a metropolitan area, region and whether he works part "
    "time. Predict his weekly wage in dollars (strongly skewed).",
    cite="Bierens and Ginther (2001), Integrated conditional moment testing of quantile regression models, Empirical "
    "Economics 26; AER (CPS1988).")

tab("used-car-prices", "Prices of used General Motors cars", "modeldata", "car_prices", "price", "regression", "rmse", "lower",
    "reg-tree2", seed=135,
    about="Each row is a used 2005 General Motors car: mileage, cylinders, doors, cruise control, sound system, leather, "
    "make (one-hot) and body type (one-hot). Predict the suggested retail price in dollars.",
    cite="Kuiper (2008), Introduction to multiple regression: how much is your car worth?, Journal of Statistics "
    "Education 16; modeldata (car_prices).")

tab("ozone-level", "Daily maximum ozone in the Los Angeles basin", "mlbench", "Ozone", "v4", "regression", "mae", "lower",
    "reg-linear", seed=136, missing="fill", prep=lambda df: df[df["v4"].notna()],
    note="days without an ozone reading dropped",
    about="Each row is a day of 1976 in the Los Angeles basin: month (v1), day of month (v2), day of week (v3), 500 mb "
    "pressure height (v5), wind speed (v6), humidity (v7), temperatures at Sandburg (v8) and El Monte (v9), inversion base "
    "height (v10), pressure gradient (v11), inversion base temperature (v12) and visibility (v13); many readings are "
    "missing. Predict the daily maximum one-hour-average ozone reading (v4).",
    cite="Breiman and Friedman (1985), Estimating optimal transformations for multiple regression and correlation, JASA "
    "80; mlbench (Ozone).")

tab("sacramento-homes", "Sale prices of homes in Sacramento", "modeldata", "Sacramento", "price", "regression", "mae", "lower",
    "reg-linear", seed=137,
    about="Each row is a home sold in the Sacramento area over five days in 2008: city and zip code (strings with many "
    "levels), beds, baths, square feet, type, latitude and longitude. Predict the sale price in dollars.",
    cite="SpatialKey sample data (Sacramento real estate transactions); modeldata (Sacramento).")

tab("package-check-times", "Check times of CRAN packages", "modeldata", "check_times", "check_time", "regression", "mae",
    "lower", "reg-linear", seed=138, drop=("package", "status"),
    about="Each row is an R package on CRAN (2018): numbers of authors, imports, suggests and depends, Roxygen and GitHub "
    "use, description length, counts and sizes of R, documentation, compiled source, data and test files, namespace "
    "imports and exports, S3 and S4 methods. Predict the time R CMD check took, in seconds (heavily skewed).",
    cite="Kuhn (2018), CRAN check times, as distributed with modeldata (check_times).")

# ---------------------------------------------------------------- counts

tab("doctor-visits-australia", "Doctor visits in the 1977-78 Australian Health Survey", "AER", "DoctorVisits", "visits",
    "count-regression", "mae", "lower", "reg-linear", seed=141,
    about="Each row is an adult of the 1977-78 Australian Health Survey: gender, age and income (scaled), illnesses in the "
    "past two weeks, days of reduced activity, a health questionnaire score, private and government insurance and chronic "
    "conditions. Predict the number of doctor consultations in the past two weeks (a count, mostly 0).",
    cite="Cameron and Trivedi (1986), Econometric models based on count data, Journal of Applied Econometrics 1; AER "
    "(DoctorVisits).")

tab("physician-visits-nmes", "Physician office visits of elderly Americans", "AER", "NMES1988", "visits", "count-regression",
    "mae", "lower", "reg-linear", seed=142, drop=("nvisits", "ovisits", "novisits", "emergency", "hospital"),
    about="Each row is a person aged 66 or over in the 1987-88 US National Medical Expenditure Survey: self-rated health, "
    "chronic conditions, limitation of daily activities, region, age (in decades), race, gender, marriage, schooling, "
    "family income, employment, private insurance and Medicaid. Predict the number of physician office visits (a skewed "
    "count).",
    cite="Deb and Trivedi (1997), Demand for medical care by the elderly: a finite mixture approach, Journal of Applied "
    "Econometrics 12; AER (NMES1988).")

tab("recreation-trips", "Recreational boating trips to Lake Somerville", "AER", "RecreationDemand", "trips", "count-regression",
    "mae", "lower", "reg-linear", seed=143,
    about="Each row is a boat owner surveyed in East Texas (1980): their quality rating of the lake, whether they water-ski, "
    "household income, whether they paid an annual user fee and their costs of visiting Lake Conroe, Somerville and "
    "Houston. Predict the number of trips to Lake Somerville in the year (a count, mostly 0, with a long tail).",
    cite="Seller, Stoll and Chavas (1985), Validation of empirical measures of welfare change, Land Economics 61; Cameron "
    "and Trivedi (1998), Regression Analysis of Count Data; AER (RecreationDemand).")


# ---------------------------------------------------------------- multi-label


def votes_frame():
    """HouseVotes84 with the 16 bills named as in the UCI documentation."""
    df = r_frame("mlbench", "HouseVotes84")
    bills = ["handicapped_infants", "water_project", "budget_resolution", "physician_fee_freeze", "el_salvador_aid",
             "religious_groups_in_schools", "anti_satellite_test_ban", "aid_to_contras", "mx_missile", "immigration",
             "synfuels_cutback", "education_spending", "superfund_right_to_sue", "crime", "duty_free_exports",
             "export_administration_south_africa"]
    df.columns = ["party"] + bills
    return df, bills


VOTE_TAGS = ["yes_aid_to_contras", "yes_mx_missile", "yes_education_spending", "yes_crime"]


@task("congress-votes", title="Four 1984 House of Representatives votes from the other twelve",
      modality="tabular", task_type="multilabel-classification", metric="f1_macro", direction="higher",
      pred_columns=VOTE_TAGS, split="rule",
      script={"kind": "multilabel", "model": "ml-logreg", "strings": True, "missing": None},
      source="mlbench::HouseVotes84 (representatives who did not vote on all four target bills dropped)",
      licence=LICENCES["mlbench"],
      cite="Congressional Quarterly Almanac, 98th Congress, 2nd session 1984; Schlimmer (1987), UCI Congressional Voting Records.",
      about="Each row is a member of the US House of Representatives in 1984: party and their votes (y, n, or missing) on "
      "twelve key bills. Predict, for each of four other bills (aid to the Nicaraguan contras, the MX missile, education "
      "spending, crime), whether they voted yes (1) or not (0).")
def congress_votes():
    df, bills = votes_frame()
    targets = ["aid_to_contras", "mx_missile", "education_spending", "crime"]
    df = df.dropna(subset=targets).reset_index(drop=True)
    for t in targets:
        df["yes_" + t] = (df.pop(t) == "y").astype(int)
    # The 'y'/'n' votes stay strings and missing votes stay missing: the initial
    # script's encoding turns a missing vote into -1, its own category.
    return write_split(df, VOTE_TAGS, split_idx(len(df), 151, (0.5, 0.2)))


INSURANCE_TAGS = ["has_car_policy", "has_fire_policy", "has_life_policy", "has_moped_policy"]


@task("insurance-products", title="Which insurance products a customer holds",
      modality="tabular", task_type="multilabel-classification", metric="f1_macro", direction="higher",
      pred_columns=INSURANCE_TAGS, split="rule",
      script={"kind": "multilabel", "model": "ml-logreg", "strings": True, "missing": None},
      source="kernlab::ticdata (the 43 socio-demographic columns as features; a seeded 6,000 of the 9,822 customers)",
      licence=LICENCES["kernlab"],
      cite="van der Putten and van Someren (2000), CoIL Challenge 2000: The Insurance Company Case, Sentient Machine Research; "
      "kernlab (ticdata).",
      about="Each row is a customer of a Dutch insurance company, described by 43 socio-demographic attributes of their "
      "zip code area (customer subtype and main type, age band, religion, marriage, education, occupation, social class, "
      "home ownership, car ownership, health insurance and income shares, mostly coded 0-9). Predict which of four products "
      "they hold: a car policy, a fire policy, a life insurance or a moped policy (0 or 1 each).")
def insurance_products():
    df = r_frame("kernlab", "ticdata")
    owners = {"has_car_policy": "apersaut", "has_fire_policy": "abrand", "has_life_policy": "aleven", "has_moped_policy": "abrom"}
    feats = list(df.columns[:43])
    out = df[feats].copy()
    for c in feats:
        if out[c].dtype == object:
            # Factors with numeric level codes as labels ("0".."9") become numbers; the
            # customer subtype and main type keep their descriptive strings.
            conv = out[c].astype(str).str.extract(r"^(\d+)")[0]
            if conv.notna().all():
                out[c] = conv.astype(int)
    for tag, col in owners.items():
        out[tag] = (np.asarray(df[col].astype(str).str.extract(r"^(\d+)")[0].fillna("0").astype(int)) > 0).astype(int)
    out = out.sample(n=6000, random_state=152).reset_index(drop=True)
    return write_split(out, INSURANCE_TAGS, split_idx(len(out), 152, (0.5, 0.2)))
