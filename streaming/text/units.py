"""Units written in Latin letters and symbols, as said after a number (3000mAh 三千毫安时)."""

from __future__ import annotations

from streaming.text.tables import words

# (written, said, said before the number): "50km/h" is said 每小时五十公里, as the library
# does and as listeners say it; units that read better as letters stay letters (GB).
UNITS: dict[str, tuple[str, str]] = {
    "mAh": ("毫安时", ""), "Ah": ("安时", ""), "mA": ("毫安", ""), "kV": ("千伏", ""),
    "V": ("伏", ""), "W": ("瓦", ""), "kW": ("千瓦", ""), "KW": ("千瓦", ""), "MW": ("兆瓦", ""),
    "GW": ("吉瓦", ""), "mW": ("毫瓦", ""), "Wh": ("瓦时", ""), "kWh": ("千瓦时", ""),
    "KWh": ("千瓦时", ""), "kwh": ("千瓦时", ""), "MWh": ("兆瓦时", ""), "GWh": ("吉瓦时", ""),
    "dB": ("分贝", ""), "db": ("分贝", ""), "dBm": ("分贝毫瓦", ""),
    "nm": ("纳米", ""), "μm": ("微米", ""), "um": ("微米", ""), "mm": ("毫米", ""),
    "cm": ("厘米", ""), "m": ("米", ""), "km": ("公里", ""), "KM": ("公里", ""),
    "Hz": ("赫兹", ""), "kHz": ("千赫兹", ""), "KHz": ("千赫兹", ""), "MHz": ("兆赫兹", ""),
    "GHz": ("吉赫兹", ""), "ms": ("毫秒", ""), "μs": ("微秒", ""), "us": ("微秒", ""),
    "ns": ("纳秒", ""), "s": ("秒", ""), "min": ("分钟", ""), "mins": ("分钟", ""),
    "h": ("小时", ""), "hr": ("小时", ""), "hrs": ("小时", ""),
    "kg": ("千克", ""), "KG": ("千克", ""), "Kg": ("千克", ""), "g": ("克", ""),
    "mg": ("毫克", ""), "μg": ("微克", ""), "ug": ("微克", ""), "mcg": ("微克", ""),
    "t": ("吨", ""), "lb": ("磅", ""), "lbs": ("磅", ""), "oz": ("盎司", ""),
    "L": ("升", ""), "l": ("升", ""), "ml": ("毫升", ""), "mL": ("毫升", ""), "ML": ("毫升", ""),
    "m²": ("平方米", ""), "m2": ("平方米", ""), "㎡": ("平方米", ""), "km²": ("平方公里", ""),
    "cm²": ("平方厘米", ""), "mm²": ("平方毫米", ""), "m³": ("立方米", ""), "m3": ("立方米", ""),
    "cm³": ("立方厘米", ""), "km/h": ("公里", "每小时"), "KM/H": ("公里", "每小时"),
    "kmh": ("公里", "每小时"), "m/s": ("米每秒", ""), "mph": ("英里每小时", ""),
    "KB": ("K B", ""), "MB": ("M B", ""), "GB": ("G B", ""), "TB": ("T B", ""), "PB": ("P B", ""),
    "Kb": ("K b", ""), "Mb": ("M b", ""), "Gb": ("G b", ""),
    "KB/s": ("K B每秒", ""), "MB/s": ("M B每秒", ""), "GB/s": ("G B每秒", ""),
    "kB/s": ("K B每秒", ""), "Mbps": ("兆比特每秒", ""), "Gbps": ("G比特每秒", ""),
    "kbps": ("K比特每秒", ""), "Kbps": ("K比特每秒", ""), "M/s": ("M每秒", ""),
    "fps": ("帧每秒", ""), "FPS": ("帧每秒", ""), "bpm": ("次每分钟", ""),
    "rpm": ("转每分钟", ""), "RPM": ("转每分钟", ""), "mmHg": ("毫米汞柱", ""),
    "mmol/L": ("毫摩尔每升", ""), "mg/dL": ("毫克每分升", ""), "g/L": ("克每升", ""),
    "mg/L": ("毫克每升", ""), "IU": ("国际单位", ""), "kcal": ("千卡", ""), "Kcal": ("千卡", ""),
    "cal": ("卡", ""), "kJ": ("千焦", ""), "℃": ("摄氏度", ""), "°C": ("摄氏度", ""),
    "°F": ("华氏度", ""), "℉": ("华氏度", ""), "°": ("度", ""), "Ω": ("欧姆", ""),
    "kΩ": ("千欧", ""), "MPa": ("兆帕", ""), "kPa": ("千帕", ""), "Pa": ("帕", ""),
    "hPa": ("百帕", ""), "nits": ("尼特", ""), "nit": ("尼特", ""), "lm": ("流明", ""),
    "px": ("像素", ""), "dpi": ("D P I", ""), "ppi": ("P P I", ""), "inch": ("英寸", ""),
    "in": ("英寸", ""), "ft": ("英尺", ""), "mi": ("英里", ""), "cc": ("毫升", ""),
    "TOPS": ("T O P S", ""), "TFLOPS": ("T FLOPS", ""), "ppm": ("P P M", ""),
    "x": ("倍", ""), "X": ("倍", ""), "G": ("G", ""), "K": ("K", ""), "M": ("M", ""),
    "B": ("B", ""), "T": ("T", ""), "k": ("k", ""),
}  # fmt: skip
# Units one letter long, or words: only after a number that no Latin word precedes
# ("iPhone 5s", "Model 3 L"), and never before another letter.
AMBIGUOUS_UNITS = frozenset(words("s m h g t l L x X in mi G K M B T k"))
# Letters written as a unit that name rather than count (2B铅笔 二B, 2K屏 二K).
LETTER_UNITS = frozenset(words("G K M B T k"))
