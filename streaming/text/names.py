"""Names and abbreviations, as said: abbreviations with a dot, file name extensions,
top-level domains, names written with symbols (C#, C++)."""

from __future__ import annotations

from streaming.text.tables import words

# Abbreviations with a dot, as said in Chinese text and in English text.
ABBREVIATIONS: dict[str, tuple[str, str]] = {
    "Mr.": ("Mister", "Mister"), "Mrs.": ("Missus", "Missus"), "Ms.": ("Miss", "Miss"),
    "Dr.": ("Doctor", "Doctor"), "Prof.": ("Professor", "Professor"), "Jr.": ("Junior", "Junior"),
    "Sr.": ("Senior", "Senior"), "St.": ("Saint", "Saint"), "Mt.": ("Mount", "Mount"),
    "vs.": ("V S", "versus"), "Vs.": ("V S", "versus"), "VS.": ("V S", "versus"),
    "etc.": ("等等", "etcetera"), "e.g.": ("例如", "for example"), "E.g.": ("例如", "for example"),
    "i.e.": ("即", "that is"), "I.e.": ("即", "that is"), "approx.": ("约", "approximately"),
    "Inc.": ("Inc", "Inc"), "Ltd.": ("Limited", "Limited"), "Co.": ("Co", "Co"),
    "Corp.": ("Corp", "Corp"), "Fig.": ("图", "Figure"), "fig.": ("图", "figure"),
    "Vol.": ("Volume", "Volume"), "No.": ("No", "number"), "Ave.": ("Avenue", "Avenue"),
    "Rd.": ("Road", "Road"), "Dept.": ("Department", "Department"), "Gov.": ("Governor", "Governor"),
    "a.m.": ("上午", "A M"), "p.m.": ("下午", "P M"), "A.M.": ("上午", "A M"),
    "P.M.": ("下午", "P M"), "Ph.D.": ("P h D", "P h D"), "PhD.": ("P h D", "P h D"),
}  # fmt: skip
# Abbreviations that may also end a sentence: a stop is kept after them at a segment's end.
SENTENCE_FINAL_ABBREVIATIONS = frozenset({"etc.", "Inc.", "Ltd.", "Co.", "Corp.", "Jr.", "Sr."})
# File name extensions (app.py, README.md): the name is read, "." as 点.
FILE_EXTENSIONS = frozenset(
    words(
        """
    7z apk app avi bash bat bin bmp bz2 c cc cfg cjs ckpt conf cpp cs css csv dart dat db
    dll dmg doc docx dylib env exe flac gif go gz h hpp htm html ico ini ipa ipynb iso jar
    java jpeg jpg js json jsx kt less lock log lua m4a md mjs mkv mov mp3 mp4 ogg onnx pdf
    php pkl pl png ppt pptx ps1 pt pth py r rar rb rs rst safetensors scss sh so sql sqlite
    svelte svg swift tar tgz toml ts tsv tsx txt vue war wav webm webp whl xls xlsx xml xz
    yaml yml zip zsh
        """
    )
)
# Top-level domains for a host written without a scheme (example.com, gov.cn).
DOMAINS = frozenset(
    words(
        """
    ai app biz cc cloud cn co com de dev edu fr gov hk info ink int io jp la me mil net
    online org ru shop site store tech top tv tw uk us vip wang xyz
        """
    )
)
# Names written with symbols, said as their users say them.
NAMES = {
    "24/7": "二十四七",
    "C#": "C sharp",
    "F#": "F sharp",
    ".NET": "dot net",
    "C++": "C加加",
    "Wi-Fi": "Wi Fi",
}
