"""The text front-end with WeTextProcessing: readings, accounting, preview, end to end."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.cli import main as cli_main
from server.config import Settings
from server.textnorm import TextFrontend
from streaming.segment import Segmenter, SegmenterSettings
from streaming.text import SPOKEN_CHARSET
from tests.conftest import fixed_length_chattts
from tests.server.ws.test_stream import assert_complete, speak
from tests.streaming.test_text import check_accounting


@pytest.fixture(scope="module")
def frontend() -> TextFrontend:
    front = TextFrontend()
    front.load()
    return front


# (category, text, spoken): what the server says for each.
CASES: list[tuple[str, str, str]] = [
    # integers, decimals, negatives, percentages, fractions, ranges
    ("integer", "我有3个苹果", "我有三个苹果"),
    ("decimal", "价格是12.5元", "价格是十二点五元"),
    ("large", "共1000000人", "共一百万人"),
    ("negative", "温度是-5度", "温度是负五度"),
    ("negative-decimal-unit", "零下-3.5℃", "零下负三点五摄氏度"),
    ("percent", "增长了25%", "增长了百分之二十五"),
    ("percent-decimal", "降幅为0.5%", "降幅为百分之零点五"),
    ("fraction", "3/4的人", "四分之三的人"),
    ("fraction-in-context", "约1/3", "约三分之一"),
    ("range-unit", "3-5天", "三到五天"),
    ("range-bare", "10-20个", "十到二十个"),
    ("range-tilde", "1~3小时", "一到三小时"),
    ("range-chapter", "第1-2章", "第一到二章"),
    ("range-percent", "60%~70%", "百分之六十到百分之七十"),
    ("thousands", "100,000人", "十万人"),
    ("thousands-decimal", "1,234.56元", "一千二百三十四点五六元"),
    ("zero-point", "0.25", "零点二五"),
    ("pi", "3.14159", "三点一四一五九"),
    ("leading-zeros", "007号", "零零七号"),
    # currency
    ("yuan-sign", "¥12", "十二元"),
    ("dollar", "$5", "五美元"),
    ("yuan-word", "12元", "十二元"),
    ("euro", "€10", "十欧元"),
    ("pound", "£5", "五英镑"),
    ("fullwidth-yuan", "花了￥99.9", "花了九十九点九元"),
    ("dollar-magnitude", "$3.5亿", "三点五亿美元"),
    # money as assistants write it (streaming/amounts.py: the library misreads these)
    ("money-sign-and-word", "原价¥199元，现价￥99.5元", "原价一百九十九元，现价九十九点五元"),
    ("money-fullwidth-sign-and-word", "价格￥12元", "价格十二元"),
    ("money-two", "价格¥2", "价格两元"),
    ("money-word-two", "2美元", "两美元"),
    ("money-code-before", "USD 5", "五美元"),
    ("money-code-cny", "CNY 100", "一百元"),
    ("money-code-after", "100 CNY", "一百元"),
    ("money-hong-kong", "HK$100", "一百港元"),
    ("money-us", "US$5", "五美元"),
    ("money-sign-after", "5€", "五欧元"),
    ("money-not-a-hotline", "¥110", "一百一十元"),
    ("money-wan", "$1.2万", "一点二万美元"),
    ("money-yi", "¥3.5亿", "三点五亿元"),
    ("money-million", "$1.2M", "一百二十万美元"),
    ("money-billion", "$5B", "五十亿美元"),
    ("money-thousand", "$3K", "三千美元"),
    ("money-thousands-separator", "¥1,299", "一千二百九十九元"),
    ("money-thousands-cents", "$1,299.99", "一千二百九十九点九九美元"),
    ("money-zero-cents", "¥199.00", "一百九十九元"),
    ("money-trailing-zero", "12.50元", "十二点五元"),
    ("money-range-sign", "¥10-20", "十到二十元"),
    ("money-range-both-signs", "$5-$10", "五到十美元"),
    ("money-range-en-dash", "$5–10", "五到十美元"),
    ("money-range-tilde-word", "10~20元", "十到二十元"),
    ("money-range-sign-and-word", "¥10~20元", "十到二十元"),
    ("money-range-magnitude", "$5-10万", "五到十万美元"),
    ("money-range-code", "5-10 USD", "五到十美元"),
    ("money-range-two", "2-5美元", "两到五美元"),
    ("money-negative", "-¥5", "负五元"),
    ("money-negative-after-sign", "¥-5", "负五元"),
    ("money-negative-unicode", "亏损−$1.2万", "亏损负一点二万美元"),
    ("money-rate", "$10/月", "十美元每月"),
    ("money-rate-word", "¥1.5/斤", "一点五元每斤"),
    ("money-rate-count", "$0.002/1K tokens", "零点零零二美元每一千 tokens"),
    ("money-yen-word", "¥1000日元", "一千日元"),
    ("percent-plus", "同比+5%", "同比正百分之五"),
    ("percent-minus", "-3.2%", "负百分之三点二"),
    ("percent-plus-minus", "±2%", "正负百分之二"),
    ("percent-two", "+2%", "正百分之二"),
    ("per-mille", "5‰", "千分之五"),
    ("percent-range-both", "5%-10%", "百分之五到百分之十"),
    ("percent-range-signed", "-5%~+5%", "负百分之五到正百分之五"),
    # dates and years
    ("date-zh", "2024年10月1日", "二零二四年十月一日"),
    ("date-iso", "2024-10-01", "二零二四年十月一日"),
    ("date-short", "10/1", "十月一日"),
    ("date-slash", "2024/10/01", "二零二四年十月一日"),
    ("year", "1998年", "一九九八年"),
    ("year-in-text", "2008年奥运会", "二零零八年奥运会"),
    ("month-day", "12月31日", "十二月三十一日"),
    ("month", "9月", "九月"),
    ("year-bc", "公元前221年", "公元前两百二十一年"),
    # times
    ("time-colon", "19:17", "十九点十七分"),
    ("time-dian", "19点17", "十九点十七"),
    ("time-seconds", "12:30:45", "十二点三十分四十五秒"),
    ("time-afternoon", "下午3点", "下午三点"),
    ("time-range", "10:00-12:00", "十点到十二点"),
    ("time-pm", "3:00pm", "下午三点"),
    # phone numbers and IDs, digit by digit, 1 as 幺 (text-readings.md); a dash is a blank
    ("mobile", "电话13812345678", "电话幺三八幺二三四五六七八"),
    ("landline", "拨打010-12345678", "拨打零幺零 幺二三四五六七八"),
    ("hotline", "客服400-800-8888", "客服四零零 八零零 八八八八"),
    ("id-card", "身份证110101199003071234", "身份证幺幺零幺零幺幺九九零零三零七幺二三四"),
    ("id-card-x", "身份证11010119900307123X", "身份证幺幺零幺零幺幺九九零零三零七幺二三X"),
    ("bank-card", "卡号6222021234567890123", "卡号六二二二零二幺二三四五六七八九零幺二三"),
    # ordinals
    ("ordinal", "第3名", "第三名"),
    ("ordinal-bare", "第1", "第一"),
    ("ordinal-ten", "第10届", "第十届"),
    # units and symbols
    ("km", "5km", "五公里"),
    ("kg", "10kg", "十千克"),
    ("metre", "100m", "一百米"),
    ("celsius", "25℃", "二十五摄氏度"),
    ("fahrenheit", "98.6°F", "九十八点六华氏度"),
    ("speed", "50km/h", "每小时五十公里"),
    ("milligram", "10mg", "十毫克"),
    ("times", "3×4", "三乘四"),
    ("equation", "1+1=2", "一加一等于二"),
    ("ampersand", "A&B公司", "A和B公司"),
    ("greek", "α粒子", "阿尔法粒子"),
    ("square-cm", "100cm²", "一百平方厘米"),
    ("square-metre-sign", "3㎡", "三平方米"),
    ("approx", "x≈3", "x约等于三"),
    # full-width and half-width, repeated punctuation
    ("fullwidth-mixed", "ＡＢＣ１２３", "A B C幺二三"),  # letters glued to digits: a code
    ("fullwidth-digits", "第１２３号", "第一百二十三号"),
    ("repeated-stops", "你好。。。", "你好。"),
    ("repeated-mixed", "真的吗？！！", "真的吗。"),
    ("repeated-commas", "好，，，吧", "好，吧"),
    ("ellipsis", "等等……好", "等等。好"),
    ("repeated-ascii", "你好!!!", "你好。"),
    # English inside Chinese
    ("acronym", "GPU很快", "G P U很快"),
    ("acronym-four", "NASA发射了火箭", "N A S A发射了火箭"),
    ("acronyms-two", "CEO和CTO", "C E O和C T O"),
    ("word-and-number", "我用iPhone 15 Pro", "我用iPhone 十五 Pro"),
    ("acronym-hyphen-number", "COVID-19疫情", "C O V I D 十九疫情"),
    ("model-name", "GPT-4o模型", "G P T 四o模型"),
    ("model-name-sentence", "GPT-4o很强。", "G P T 四o很强。"),
    ("model-name-digit", "GPT-4很强。", "G P T 四很强。"),
    ("acronym-sentence", "AWS很强。", "A W S很强。"),
    ("model-name-size", "Llama-3.1-8B很小。", "Llama 三点一 八B很小。"),
    ("model-name-version-size", "Qwen2.5-72B很强。", "Qwen二点五 七十二B很强。"),
    ("version-minor", "Python 3.11版本", "Python 三点一一版本"),
    ("version", "v1.2.3版本", "v一点二点三版本"),
    ("formula", "H2O是水", "H二O是水"),
    ("network", "5G网络", "五G网络"),
    ("accent", "café很好", "cafe很好"),
    ("hyphenated", "well-known作家", "well known作家"),
    ("apostrophe", "It's a good day.", "Its a good day."),
    ("english-acronym", "I love AI", "I love A I"),
    # markdown
    ("bold", "**粗体**文字", "粗体文字"),
    ("heading", "## 标题", "标题"),
    ("bullet", "- 列表项", "列表项"),
    ("ordered-item", "1. 第一项", "一， 第一项"),
    ("ordered-item-paren", "12) 第十二项", "十二， 第十二项"),
    ("ordered-item-dun", "  3、第三项", "三、第三项"),
    ("ordered-item-newline", "\n4. 第四项", "四， 第四项"),
    ("not-a-list-item", "涨了2.5倍", "涨了二点五倍"),
    ("number-ending-a-line", "总数是\n42.", "总数是 四十二。"),
    ("quote", "> 引用", "引用"),
    ("inline-code", "`code`块", "code块"),
    ("fence", "```python", ""),
    ("link", "[链接](https://a.com)", "链接"),
    ("image", "![图](x.png)", "图"),
    ("table-row", "| 名称 | 价格 |", "名称， 价格，"),
    ("table-rule", "|---|---|", ""),
    ("horizontal-rule", "---", ""),
    ("strike", "~~删除~~", "删除"),
    ("underline-bold", "__下划线__", "下划线"),
    ("citation", "结论[1]。", "结论。"),
    # URLs, e-mail, emoji, symbols
    ("url", "访问https://www.example.com/path?q=1。", "访问example点com斜杠 path。"),
    ("url-long-path", "访问https://www.example.com/a/b/c/d?q=1。", "访问example点com。"),
    (
        "url-port",
        "打开http://localhost:8080/api/v1。",
        "打开localhost冒号 八零八零斜杠 api 斜杠 v一。",
    ),
    (
        "url-no-scheme",
        "源码在github.com/2noise/ChatTTS。",
        "源码在github点com斜杠 二noise 斜杠 ChatTTS。",
    ),
    ("www", "见www.baidu.com", "见baidu点com"),
    ("email", "邮箱test@example.com", "邮箱test 艾特 example点com"),
    ("emoji", "好的😀", "好的"),
    ("emoji-only", "👍👍", ""),
    ("emoji-sequence", "❤️爱你", "爱你"),
    # control tags (not allowed by default)
    ("tags-stripped", "[uv_break]好[laugh]", "好"),
    # sentences
    ("issue-example", "我有3个苹果，价格是12.5元", "我有三个苹果，价格是十二点五元"),
    (
        "mixed",
        "今天是2024年10月1日，GPU价格上涨了15%。",
        "今天是二零二四年十月一日，G P U价格上涨了百分之十五。",
    ),
    ("meeting", "会议19:30开始，请准时。", "会议十九点三十分开始，请准时。"),
    ("interjection-kept", "好啊，这儿有3个", "好啊，这儿有三个"),
    ("traditional-kept", "這個3個", "這個三個"),
    # blanks around a number join it to its Chinese (no blank, no pause); others stay
    ("blank-around-time", "下午 3 点见", "下午三点见"),
    ("blank-around-dialled-number", "请拨打 12315 热线", "请拨打幺二三幺五热线"),
    ("blank-after-latin-kept", "GPU 价格 3 元", "G P U 价格三元"),
    # 2 before a unit counts (两), alone and in a range; a signed number does not
    ("two-before-unit", "2℃", "两摄氏度"),
    ("two-range-before-unit", "2~8℃", "两到八摄氏度"),
    ("signed-range-before-unit", "-2~2℃", "负二到二摄氏度"),
    ("signed-two-before-unit", "-2℃", "负二摄氏度"),
    ("count-cue-in-clause", "每周更新2集", "每周更新两集"),
    # places, numbers to dial, stock codes, keys
    ("room-after-building", "7-2-301", "七 二 三零幺"),
    ("dialled-then-word", "请拨打12320卫生热线", "请拨打幺二三二零卫生热线"),
    ("dialled-count-stays-count", "拨打了300次", "拨打了三百次"),
    ("stock-code-in-brackets", "茅台（600519）", "茅台，六零零五幺九，"),
    ("key-hash-no-double", "请按 # 号键", "请按井号键"),
    ("key-star", "按*键", "按星号键"),
    ("number-sign-no-double", "#3号", "三号"),
    # formulas, chemistry, sizes; and what is none
    ("function-notation", "f(x)=2x", "f x等于二x"),
    ("equation-with-blanks", "y = 3x - 2", "y等于三x减二"),
    ("chemical-formula", "H₂SO₄", "H二S O四"),
    ("subscript-variable", "x₁", "x一"),
    ("dimensions", "595×565×850mm", "五百九十五乘五百六十五乘八百五十毫米"),
    ("resolution-stays-digits", "2560×1440", "二五六零乘幺四四零"),
    ("zoom-stays-times", "支持3x变焦", "支持三倍变焦"),
    ("units-are-no-variables", "5kg+3kg=8kg", "五千克加三千克等于八千克"),
    ("hyphenated-name-no-minus", "k-means聚类", "k means聚类"),
    # scores and time ranges
    ("score-before-result", "主队 2-0 领先", "主队二比零领先"),
    ("range-stays-range", "每天练习3-5组", "每天练习三到五组"),
    ("time-range-next-day", "22:00-次日 07:00", "二十二点到次日七点"),
    ("meridiem-range", "10am-6pm", "上午十点到下午六点"),
]


def test_table_is_large_enough() -> None:
    """The table covers at least 80 cases."""
    assert len(CASES) >= 80
    assert len({case[0] for case in CASES}) == len(CASES)


@pytest.mark.parametrize(("text", "spoken"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_reading(frontend: TextFrontend, text: str, spoken: str) -> None:
    """Each row is spoken exactly as listed, and every character is accounted for."""
    prepared = frontend.prepare(text)
    assert prepared.spoken == spoken
    check_accounting(text, prepared)
    assert all(SPOKEN_CHARSET.fullmatch(ch) for ch in prepared.spoken)


@pytest.mark.parametrize(
    ("text", "removed"),
    [
        ("我有3个苹果，价格是12.5元", []),
        ("**好**", [(0, "**", "markup"), (3, "**", "markup")]),
        ("见https://a.io/x?y=1。", [(1, "https://", "url"), (15, "?y=1", "url")]),
        ("见https://a.io/a/b/c/d。", [(1, "https://", "url"), (13, "/a/b/c/d", "url")]),
        ("好的😀", [(2, "😀", "emoji")]),
        ("好[laugh]", [(1, "[laugh]", "tag")]),
        ("你好。。。", [(3, "。。", "punctuation")]),
        ("It's", [(2, "'", "punctuation")]),
        ("好¤", [(1, "¤", "unspeakable")]),
    ],
)
def test_removals(frontend: TextFrontend, text: str, removed: list[tuple[int, str, str]]) -> None:
    """Only characters genuinely dropped are reported, with their position and reason."""
    assert [(r.start, r.chars, r.reason) for r in frontend.prepare(text).removed] == removed


def test_rewrites_map_input_spans(frontend: TextFrontend) -> None:
    """Transformed spans are spoken, not removed, and map back to their exact source."""
    prepared = frontend.prepare("我有3个苹果，价格是12.5元")
    assert prepared.removed == ()
    sources = {(p.start, p.end, p.source): p.spoken for p in prepared.rewrites}
    assert sources[(2, 3, "3")] == "三"
    assert any(
        src.startswith("12.5") and said.startswith("十二点五")
        for (_, _, src), said in sources.items()
    )


def test_control_tags_allowed() -> None:
    """With allow_control_tags, ChatTTS tags stay in the spoken text and are listed."""
    front = TextFrontend(allow_control_tags=True, normalizer_factory=lambda: None)
    prepared = front.prepare("好[uv_break]的[laugh]，3")
    assert prepared.spoken == "好[uv_break]的[laugh]，"
    assert prepared.tags == ("[uv_break]", "[laugh]")
    assert [(r.chars, r.reason) for r in prepared.removed] == [("3", "number")]


def test_unavailable_normaliser_drops_and_reports_digits() -> None:
    """If the library cannot load, digits are dropped and reported (never silently)."""

    def broken() -> None:
        raise ImportError("no pynini")

    prepared = TextFrontend(normalizer_factory=broken).prepare("我有3个")
    assert prepared.spoken == "我有个"
    assert [(r.chars, r.reason) for r in prepared.removed] == [("3", "number")]


def test_plain_text_does_not_load_the_normaliser() -> None:
    """Text with nothing to normalise never waits for the library to load."""
    calls: list[int] = []

    def factory() -> None:
        calls.append(1)

    front = TextFrontend(normalizer_factory=factory)
    assert front.prepare("你好，世界。Hello.").spoken == "你好，世界。Hello。"
    assert calls == []
    front.prepare("3个")
    assert calls == [1]


# -- properties with normalisation on -------------------------------------------------

PIECES = [
    "12.5", "3", "-7", "0.5%", "1/3", "3-5", "10:30", "19点17", "2024-10-01", "2024年",
    "10月1日", "¥12", "$5", "12元", "13812345678", "110101199003071234", "1,000", "v1.2.3",
    "5km", "25℃", "×", "~", "+", "=", "&", "GPU", "iPhone", "COVID-19", "café", "**",
    "## ", "- ", "`", "```py", "[a](http://x.io/y)", "https://a.com/b?c=1", "a@b.cn", "😀",
    "👍🏽", "[uv_break]", "[laugh]", "[break_3]", "。。。", "？！", "…", "，", "、", "“", "”",
    "（", "）", "《", "》", "ＡＢ", "１２", "\n", " ", "\t", "我", "有", "苹果", "价格",
    "是", "的", "啊", "儿", "這", "Hello", "world", ".", ",", "!", "?", ":", ";", "|", "#",
    "@", "%", "/", "\\", "_", "¤", "★", "\u200b", "\u3000", "㐀", "α", "½", "①",
    "¥199元", "￥99.5", "$5–10", "HK$", "USD 5", "$1.2M", "+5%", "-3.2%", "5‰", "/月",
    # the number rules' shapes: phones, codes, labels, math, dotted tokens, lists
    "+86 138 1234 5678", "(021) 6888 8888", "验证码", "826491", "尾号", "302", "房间", "端口",
    "$E=mc^2$", "\\frac{1}{2}", "x²", "√2", "2^10", "No.1", "Mr. ", "e.g.", "U.S.", "app.py",
    "192.168.1.1", "H.264", "3:2", "比分", "月薪", "3k", "5w", "①", "1. ", "(1)", "2点半", "B2",
    "RTX 4090", "1080p", "95后", "0x1F", "600519.SH", "5mg/kg", "138****5678", "双11", "第",
    "个", "号", "楼", "2", "22", "2000", "12:30", "-", "~", "10-20", "3.2节", "18~26℃",
]  # fmt: skip
adversarial = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)
unicode_noise = st.text(max_size=40)


@settings(max_examples=200, deadline=None)
@given(text=st.one_of(adversarial, unicode_noise))
def test_nothing_is_lost(frontend: TextFrontend, text: str) -> None:
    """Spoken pieces plus reported removals account for every non-blank input character."""
    prepared = frontend.prepare(text)
    check_accounting(text, prepared)
    assert all(SPOKEN_CHARSET.fullmatch(ch) for ch in prepared.spoken)


def test_nothing_is_lost_large_corpus(frontend: TextFrontend) -> None:
    """500 seeded random texts of numbers, markup, symbols and noise: all accounted for."""
    rng = random.Random(20241001)
    for _ in range(500):
        parts = [rng.choice(PIECES) for _ in range(rng.randint(0, 12))]
        if rng.random() < 0.2:
            parts.append("".join(chr(rng.randint(0x20, 0x2FFFF)) for _ in range(5)))
        text = "".join(parts)
        check_accounting(text, frontend.prepare(text))


def speak_all(
    frontend: TextFrontend, text: str, config: SegmenterSettings, sizes: list[int]
) -> list[str]:
    segmenter = Segmenter(config)
    segments = []
    points = sorted({0, len(text), *(s % (len(text) + 1) for s in sizes)})
    for a, b in itertools.pairwise(points):
        segments += segmenter.push(text[a:b])
    segments += segmenter.flush()
    return [frontend.prepare(s.text).spoken for s in segments]


@settings(max_examples=150, deadline=None)
@given(
    text=adversarial,
    max_chars=st.integers(min_value=4, max_value=40),
    cuts=st.lists(st.integers(min_value=0), max_size=20),
)
def test_streaming_equals_one_shot(
    frontend: TextFrontend, text: str, max_chars: int, cuts: list[int]
) -> None:
    """Text pushed in any chunks is spoken exactly as the same text pushed at once."""
    config = SegmenterSettings(max_chars=max_chars, first_min_chars=4)
    assert speak_all(frontend, text, config, cuts) == speak_all(frontend, text, config, [])
    one_char = list(range(len(text) + 1))
    assert speak_all(frontend, text, config, one_char) == speak_all(frontend, text, config, [])


# -- preview: HTTP and CLI -------------------------------------------------------------

PREVIEW_TEXT = "我有3个苹果，价格是12.5元。**NASA**在2024-10-01发布😀"


@pytest.fixture(scope="module")
def espeak_server() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak", tokens=("secret",))) as live:
        yield live


@pytest.mark.live
def test_preview_endpoint(espeak_server: LiveServer) -> None:
    """POST /v1/preview returns each segment as it would be spoken, with removals."""
    with httpx.Client(base_url=espeak_server.base_url, timeout=TIMEOUT_S) as http:
        refused = http.post("/v1/preview", json={"text": PREVIEW_TEXT})
        assert refused.status_code == 401
        response = http.post(
            "/v1/preview",
            json={"text": PREVIEW_TEXT},
            headers={"Authorization": "Bearer secret"},
        )
    assert response.status_code == 200
    segments = response.json()["segments"]
    assert "".join(s["text"] for s in segments) == PREVIEW_TEXT
    assert [s["spoken"] for s in segments] == [
        "我有三个苹果，",
        "价格是十二点五元。",
        "N A S A在二零二四年十月一日发布",
    ]
    removed = [(r["start"], r["chars"], r["reason"]) for s in segments for r in s["removed"]]
    star = PREVIEW_TEXT.index("**")
    assert removed == [
        (star, "**", "markup"),
        (star + 6, "**", "markup"),
        (PREVIEW_TEXT.index("😀"), "😀", "emoji"),
    ]
    rewrites = {r["text"]: r["spoken"] for s in segments for r in s["rewrites"]}
    assert rewrites["3"] == "三"
    assert rewrites["2024-10-01"] == "二零二四年十月一日"
    for rewrite in (r for s in segments for r in s["rewrites"]):
        assert PREVIEW_TEXT[rewrite["start"] : rewrite["end"]] == rewrite["text"]


def test_preview_cli(capsys: pytest.CaptureFixture[str]) -> None:
    """``chattts-stream preview`` prints the same segments as JSON."""
    assert cli_main(["preview", "--allow-control-tags", "true", "好[laugh]，3点了。再见"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["mode"] == "stream"
    assert [(s["spoken"], s["tags"]) for s in body["segments"]] == [
        ("好[laugh]，", ["[laugh]"]),
        ("三点了。", []),
        ("再见", []),
    ]


def test_preview_cli_reads_money_whole(capsys: pytest.CaptureFixture[str]) -> None:
    """``chattts-stream preview``: each amount is one rewrite; a model name keeps 。."""
    assert cli_main(["preview", "原价¥199元，现价￥99.5元。GPT-4o很强。"]) == 0
    segments = json.loads(capsys.readouterr().out)["segments"]
    assert [s["spoken"] for s in segments] == [
        "原价一百九十九元，",
        "现价九十九点五元。",
        "G P T 四o很强。",
    ]
    rewrites = {r["text"]: r["spoken"] for s in segments for r in s["rewrites"]}
    assert rewrites["¥199元"] == "一百九十九元"
    assert rewrites["￥99.5元"] == "九十九点五元"
    assert all(s["removed"] == [] for s in segments)


# -- end to end: the real ChatTTS code path ------------------------------------------


@pytest.mark.live
@pytest.mark.slow
async def test_numbers_dates_and_acronyms_spoken_in_full_chattts(tiny_checkpoint: Path) -> None:
    """Over the WebSocket on ChatTTS, numbers, a date and an acronym are spoken in full."""
    text = "我有3个苹果，价格是12.5元。NASA在2024年10月1日发布[uv_break]了新闻。"
    settings = Settings(engine="chattts", model_dir=tiny_checkpoint, allow_control_tags=True)
    with run_live_server(settings, engine=fixed_length_chattts(tiny_checkpoint)) as server:
        result = await speak(server, text, size=3)
    assert_complete(result, text)
    assert result.warnings == []
    spoken = [s["spoken"] for s in result.segments]
    assert spoken == [
        "我有三个苹果，",
        "价格是十二点五元。",
        "N A S A在二零二四年十月一日发布[uv_break]了新闻。",
    ]
    assert [s["text"] for s in result.segments][2] == "NASA在2024年10月1日发布[uv_break]了新闻。"


@pytest.mark.live
async def test_code_block_is_reported_not_read(espeak_server: LiveServer) -> None:
    """A fenced code block streamed in small deltas is reported as code and makes no audio."""
    from chattts_client import StreamClient

    text = "说明如下：\n```python\nprint(1)\n```\n以上就是代码。"
    async with StreamClient.connect(espeak_server.ws_url, token="secret") as client:
        for i in range(0, len(text), 3):
            await client.send_text(text[i : i + 3])
        await client.end()
        result = await client.collect(timeout_s=30)
    spoken = [s["spoken"] for s in result.segments]
    assert "".join(spoken) == "说明如下，以上就是代码。"
    code = [r["chars"] for w in result.warnings for r in w["removed"] if r["reason"] == "code"]
    assert code == ["print(1)"]
    code_segments = {s["index"] for s in result.segments if s["text"].strip() == "print(1)"}
    assert not code_segments & {f.segment for f in result.frames}
