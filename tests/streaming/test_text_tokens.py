"""Tokens said whole: no pause inside a name, a number or an address wherever it stands,
two numbers side by side kept apart, and a number said the same way each time."""

from __future__ import annotations

import pytest

from streaming.segment import Segmenter, SegmenterSettings
from streaming.text import PreparedText, prepare_text
from tests.streaming.test_text import check_accounting

_PAUSES = frozenset("。，、.,")


def rules_only(text: str) -> str:
    """No library: what is read is read by the rules alone."""
    return text


def prepare(text: str, **kwargs: object) -> PreparedText:
    prepared = prepare_text(text, normalizer=rules_only, **kwargs)  # type: ignore[arg-type]
    check_accounting(text, prepared)
    return prepared


# Tokens a listener hears as one word or one number: their dots, colons, slashes and
# blanks are no pause.
TOKENS = [
    "No. 1", "No.12345", "Mr. Smith", "Dr. Wang", "e.g.", "U.S.", "vs.", "etc.", "Inc.",
    "app.py", "report_2024.final.pdf", "财报.xlsx", "Node.js", "os.path.join", "example.com",
    "www.example.com", "example.com/docs", "github.com/2noise/ChatTTS",
    "http://localhost:8080/api/v1", "https://www.example.com:8443/login?next=/home",
    "support@example.com", "zhang.san@company.com.cn", "192.168.1.10", "10.0.0.1:3306",
    "localhost:8080", "db.internal:5432", "v1.2.3", "v2.0.1", "20.11.0", "Python 3.12",
    "iOS 17.2", "H.264", "M.2", "3.2节", "600519.SH", "00700.HK", "RTX 4090", "ISO 9001",
    "IEEE 802.11ax", "Wi-Fi 6E", "USB 3.2", "PCIe 4.0", "GPT-4o", "Qwen2.5-72B", "23H2",
    "+86 138 1234 5678", "400-820-8820", "(021) 6888 8888", "2024.3.15", "15/03/2024",
    "14:30:15", "9:00-18:00", "1,234.56元", "¥1,299", "-3.2%", "-10~5℃", "3:2", "1:1000",
    "HTTP/2", "USB 3.2 Gen 2", "PCIe 4.0 x4", "M3 Max", "1080p", "2560x1440", "G1234", "CA1831",
    "2024.01.01-2024.12.31", "03-15 14:22", "6222 0212 3456 7890", "A.I.", "Ph.D.",
]  # fmt: skip
# Where they stand: first, last, before and after Chinese, in English, between blanks,
# after a clause mark, at a line's end.
CONTEXTS = [
    "{}", "请看{}。", "{}很好。", "详见 {} 。", "参考{}，然后继续。", "Use {} now.",
    "第一步：{}\n第二步：好", "他说“{}”就走了。", "（{}）", "是{}吗？",
]  # fmt: skip


def _cuts(text: str) -> list[int]:
    segmenter = Segmenter(SegmenterSettings(max_chars=80, first_min_chars=3))
    segments = [*segmenter.push(text), *segmenter.flush()]
    return [segment.end for segment in segments[:-1]]


@pytest.mark.parametrize("token", TOKENS)
@pytest.mark.parametrize("context", CONTEXTS)
def test_no_pause_inside_a_token(token: str, context: str) -> None:
    """The segmenter does not cut inside the token, and nothing said for its characters
    is a pause, in every context."""
    text = context.format(token)
    start = context.index("{}")
    end = start + len(token)
    assert not [cut for cut in _cuts(text) if start < cut < end], text
    prepared = prepare(text)
    inside = [
        piece
        for piece in prepared.pieces
        if start <= piece.start and piece.end <= end and (piece.start < end or piece.end > start)
        and not (piece.start == piece.end and piece.start in (start, end))
    ]  # fmt: skip
    assert inside, text
    pauses = [(p.source, p.spoken) for p in inside if _PAUSES & set(p.spoken)]
    assert pauses == [], text


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("Llama 3.1 405B模型", "Llama 三点一、四百零五B模型"),
        ("内存是DDR5 6000MHz", "D D R五、六千兆赫兹"),
        ("Windows 11 23H2已推送", "Windows 十一、二三H二已推送"),
        ("版本 2.0 3.0 都支持", "二点零、三点零"),
        ("验证码 826491 五分钟内有效", "八二六四九幺、五分钟"),
    ],
)
def test_two_numbers_side_by_side_are_kept_apart(text: str, said: str) -> None:
    """A blank between two numbers read out is a short pause: ChatTTS hears no blank
    between ideographs, and 三点一四百零五 or 五六千 would be one number."""
    assert said in prepare(text).spoken


@pytest.mark.parametrize(
    ("text", "said"),
    [("下午 3 点", "下午三点"), ("住在 5 号楼 3 单元 1202", "住在五号楼三单元幺二零二")],
)
def test_a_number_and_its_word_stay_one_phrase(text: str, said: str) -> None:
    """A blank between a number and Chinese is still no pause (one phrase)."""
    assert prepare(text).spoken == said


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("A. 同意 B. 不同意", "A， 同意 B， 不同意"),
        ("请选择：A）是 B）否", "请选择，A，是 B，否"),
        ("A. 选项一\nB. 选项二", "A， 选项一 B， 选项二"),
        ("A、B两组", "A、B两组"),
    ],
)
def test_a_letter_marking_an_option_is_followed_by_a_comma(text: str, said: str) -> None:
    """An option's letter before Chinese is a list mark: the letter and a comma (as
    "1. 打开" is 一， 打开), never a stop (A。)."""
    assert prepare(text).spoken == said


@pytest.mark.parametrize(
    ("text", "segments"),
    [
        ("Apple Inc. 发布了新品。", ["Apple Inc. 发布了新品。"]),
        ("这家公司叫Acme Ltd. 总部在伦敦。", ["这家公司叫Acme Ltd. 总部在伦敦。"]),
        ("I work at Acme Inc. Then I left.", ["I work at Acme Inc.", " Then I left."]),
    ],
)
def test_a_company_suffix_before_chinese_ends_no_sentence(text: str, segments: list[str]) -> None:
    """Inc. Ltd. Co. before Chinese are no sentence end (before English they may be)."""
    segmenter = Segmenter(SegmenterSettings(max_chars=80, first_min_chars=80))
    assert [s.text for s in [*segmenter.push(text), *segmenter.flush()]] == segments


def test_a_code_said_again_is_said_the_same_way() -> None:
    """A number a cue made a code is a code when it comes back bare in the segment."""
    spoken = prepare("验证码是3307，请在页面输入3307完成验证").spoken
    assert spoken.count("三三零七") == 2
    assert "三千" not in spoken


def test_a_code_from_an_earlier_segment_is_said_the_same_way() -> None:
    """The codes an earlier segment read (its ``codes``) make the same bare number a code."""
    first = prepare("您的取件码是5126，")
    assert first.codes == (("5126", "五幺二六", "digits.code"),)
    assert prepare("凭5126取件。", codes=first.codes).spoken == "凭五幺二六取件。"
    assert prepare("凭5126取件。").spoken == "凭五千一百二十六取件。"


def test_a_repeated_number_that_counts_stays_a_count() -> None:
    """Only a bare number is said again as a code: a measure word or a unit after it
    keeps it a quantity."""
    spoken = prepare("工号1024的员工，本月加班1024分钟，1024请到前台").spoken
    assert spoken.count("幺零二四") == 2
    assert "一千零二十四分钟" in spoken


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("1.打开设置 2.点击关于", "一，打开设置，二，点击关于"),
        ("共3点：1.快 2.稳 3.准", "共三点，一，快，二，稳，三，准"),
        ("注意：\n1.不要外传\n2.及时修改", "注意， 一，不要外传 二，及时修改"),
    ],
)
def test_list_items_glued_to_their_text(text: str, said: str) -> None:
    """A list number glued to Chinese ("1.不要外传") is an item, not a sentence end, and an
    inline item after a word is parted from it by a pause (设置，二, not 设置二)."""
    assert prepare(text).spoken == said
    segmenter = Segmenter(SegmenterSettings(max_chars=80, first_min_chars=80))
    segments = [s.text for s in [*segmenter.push(text), *segmenter.flush()]]
    assert not [s for s in segments if s.rstrip().endswith(".")], segments


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("血压120/80mmHg", "血压一百二十，八十毫米汞柱"),
        ("空气质量良（AQI 78）。", "空气质量良，A Q I 七十八。"),
    ],
)
def test_pauses_only_where_the_text_has_one(text: str, said: str) -> None:
    """Two values written with a slash are parted by a pause (一百二十八十 would be one
    number); a number in brackets is no list item, so no pause comes before it."""
    assert prepare(text).spoken == said


def test_a_year_said_again_is_said_as_a_year() -> None:
    """A year (2024年) written again bare is still said digit by digit."""
    spoken = prepare("2024年是关键的一年，2024也是龙年").spoken
    assert spoken.count("二零二四") == 2


LONG_TOKENS = [
    "http://localhost:8080/api/v1", "https://www.example.com:8443/login?next=/home",
    "support@example.com", "github.com/2noise/ChatTTS", "192.168.1.10:8080",
    "6222 0212 3456 7890", "2024.01.01-2024.12.31", "Llama 3.1 405B", "+86 138 1234 5678",
    "Windows 11 23H2", "PCIe 4.0 x4",
]  # fmt: skip


@pytest.mark.parametrize("token", LONG_TOKENS)
def test_a_length_cut_goes_around_a_token(token: str) -> None:
    """In a text with no mark to cut at, the length cut never falls inside a token,
    wherever it stands near the limit and however the text is streamed."""
    filler = "这是一段很长的说明文字" * 10
    for at in range(40, 90):
        text = filler[:at] + token + "，然后继续说明后面的内容。" + filler
        for chunk in (1, 3, len(text)):
            segmenter = Segmenter(SegmenterSettings(max_chars=80, first_min_chars=3))
            segments = []
            for i in range(0, len(text), chunk):
                segments += segmenter.push(text[i : i + chunk])
            segments += segmenter.flush()
            cuts = [s.end for s in segments[:-1]]
            assert not [c for c in cuts if at < c < at + len(token)], (token, at, chunk)
