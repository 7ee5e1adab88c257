"""The front-end's data on numbers: measure words, cue words, service numbers, labels
(units: :mod:`.units`; symbols and LaTeX: :mod:`.symbols`; names: :mod:`.names`).

Rules live in code; what they look up lives here, as tables a reader can check against
text-readings (GB/T 15835-2011, 吕叔湘《现代汉语八百词》, SSML ``say-as``).
"""

from __future__ import annotations


def words(text: str) -> tuple[str, ...]:
    """A table written as blank-separated words, longest first (regex alternations)."""
    return tuple(sorted(set(text.split()), key=lambda w: (-len(w), w)))


# -- measure words: what a number before them is ------------------------------------------
# A count (两个, 两天): 2 is 两. Longest first, so 个月 wins over 月 and 年级 over 年.
COUNT_MEASURES = words(
    """
    个 位 名 只 条 张 件 本 支 把 根 块 片 份 种 类 项 次 遍 趟 回 顿 场 局 盘 轮 届 天 周
    星期 礼拜 年 个月 小时 钟头 钟 分钟 秒 秒钟 毫秒 微秒 刻钟 倍 成 人 户 家 辆 台 部 架 艘
    套 双 对 副 杯 瓶 碗 盒 包 袋 箱 桶 罐 斤 公斤 克 千克 毫克 微克 吨 米 公里 千米 厘米
    毫米 微米 纳米 里 英里 海里 尺 寸 英寸 英尺 升 毫升 度 元 块钱 角 毛 分 分钱 岁 周岁
    集 页 段 句 行 字 篇 首 幅 颗 粒 滴 口 间 栋 座 节 章 门 课 科 所 例 起 笔 单 款 样
    头 匹 尾 棵 株 朵 串 排 列 组 批 群 队 步 声 下 眼 针 剂 疗程 周期 季度 学期 星 颗星
    亩 平 平米 平方米 平方公里 公顷 立方米 瓦 千瓦 伏 安 毫安 焦 卡 千卡 大卡 帧 像素 核
    线程 通道 路 票 单元 期 季 代 班 站 环 层 轮次 局面 万 千 百 亿 十 来个 多个 余个
    个人 名额 人次 家人 小孩 孩子 趟车 班车 站地 口人 床 晚 夜 宿 餐 顿饭 道 道菜 勺 汤匙
    茶匙 杯水 片药 粒药 寸照 兆 格 根线 级台阶 倍速 倍数 份儿 碗饭 下单 手 股 枚 封 盏 扇
    面 幢 宗 帖 味 管 听 提 打 卷 册 曲 幕 出 拨 桌 圈 周年 室 厅 卫 趟 程 站路 公分 分米
    千米 光年 毫升 立方 吨位 摄氏度 华氏度 赫兹 瓦特 伏特 安培 焦耳 帕 兆帕 分贝 流明
    像素 万像素 千卡 卡路里 毫安时 毫安 比特 字节 兆字节 美元 欧元 英镑 日元 港元 港币 韩元
    卢布 澳元 台币 人民币 学时 课时 学分 分钟 工作日 个工作日 小节 遍数 门课 所学校 局比赛
    车道 居 居室 厢 缸 镜头 摄 声道 连胜 连败 胜 负 平 球 粒 罐 碟 轮胎 缸 挡 车位 人份 份量 折
    期免息 期分期 期付款 件套 人成团 星好评
    """
)
# A number naming its place (二楼, 二号, 二月): 2 is 二. Checked before COUNT_MEASURES.
ORDINAL_MEASURES = words(
    """
    楼 号 号线 号楼 号口 号门 号床 号窗口 号柜台 号车厢 号厅 号馆 号位 号机 号桌 号房
    月 月份 日 年级 级 环 期 单元 区 栋 代 班 路 号路 线 档 版 季 章 节 集 排 层 座
    车厢 站台 检票口 登机口 楼层 层楼 号店 号仓 次元 胎 型 线城市 哥 姐 弟 妹 叔 婶 姨 舅 伯
    爷 手房 手车 手货 把手 等奖 等座 等舱 星级
    """
)
# Words that start with a measure word's character but are no measure (315晚会, 3点评).
NOT_MEASURES = words(
    """
    晚会 晚上 晚餐 晚安 天气 天下 天然 天空 度假 度过 分析 分享 分类 分别 分配 分布 分开 点评
    点击 点赞 点餐 场景 场馆 期间 期待 期望 期货 期刊 集团 集合 集成 部门 部分 部署 本身 本地
    本人 本来 本次 条件 位置 名字 名称 号码 号召 起来 起点 科技 线上 线下 行业 行为 页面 门店
    路线 路上 头条 头发 口罩 口碑 口味 段落 块链 片区 片刻 台风 台湾 台词 周边 周末 周围
    周期性 年轻 年龄 年底 年初 年末 年中 人员 人工 人群 人数 家庭 家居 家用 层面 层次 层级
    次数 次日 代码 代表 代理 班级 站点 环境 环节 环保 栋梁 届时 版本 版权 档次 档案 区域
    区别 区块 级别 品牌 项目 米饭 毛病 角度 顿时 轮流 局部 局长 盘点 户外 艘船 票价 核心
    卫生 卫星 卫健委 人民 人寿 人社 人力 人才 台风 台湾 市民 市长 门诊 站内
    盘中 盘前 盘后 盘面 盘口 股价 股东 股份 门口 门前 门外 门卡 门牌 门禁
    """
)
# Ordinal measures that count after a count cue (共2层, 有2栋, 连续2期, 前2章).
SWITCH_MEASURES = frozenset(words("层 栋 期 季 章 节 集 排 座 代 班 路 级 区 档 版 单元 线 环"))
# Words before a number that make it a count, for the measures that may count or name.
COUNT_CUES = words(
    """
    有 共 共计 合计 总共 一共 总计 了 这 那 前 后 近 约 大约 大概 最多 至多 至少 最少 仅 仅仅 只
    只有 再 每 多 超过 不到 不足 连续 整整 花 用 需 需要 要 等 过 隔 分 分成 分为 为 成 增加
    减少 提升 下降 上升 涨 跌 升 降 加 减 高 长 宽 深 重 达 逾 近乎 将近 还有 还剩 剩 剩下
    相差 差 少 多了 来 去 跑 走 吃 喝 服 服用 买 卖 送 带 拿 订 约有 大于 小于 到 至 或 和
    更新 连更 播出 播放 推出 上线 发布 出 出了 出版 连载 拍 拍摄 录制 看 看完 读 读完 学 学完
    写 写完 追 补 开设 开了 设有 建 盖
    """
)
# A count cue that reaches across the clause: 每周更新2集 (two episodes a week).
CLAUSE_COUNT_CUES = words("每")

# -- cue words: a number after (or before) them is read digit by digit ----------------------
CODE_CUES_BEFORE = words(
    """
    验证码 校验码 动态码 确认码 安全码 授权码 激活码 邀请码 兑换码 优惠码 券码 取件码 取货码
    取餐码 提货码 核销码 取票码 密码 口令 PIN码 PIN 订单号 订单编号 订单 单号 运单号 运单
    快递单号 快递号 物流单号 物流号 追踪号 跟踪号 包裹号 流水号 交易号 交易单号 退款单号
    工单号 工单 售后单号 服务单号 申请单号 预约号 排队号 挂号 编号 序列号 SN 批号 批次号
    型号 货号 款号 商品编号 商品码 条码 条形码 票号 会员号 会员卡号 卡号 账号 帐号 账户
    户号 客户号 用户ID 用户名 ID UID 学号 工号 编码 代码 股票代码 证券代码 基金代码 邮编
    邮政编码 区号 分机 分机号 尾号 末尾 末位 后四位 后4位 末四位 末4位 后六位 后6位 前四位
    身份证号 身份证号码 身份证 护照号 护照 车牌号 车牌 房间号 房号 房间 门牌号 室 座位号
    座位 座号 检票口 站台 车次 航班号 航班 列车 动车 高铁 端口 端口号 port Port PORT QQ号
    QQ 微信号 微信 手机号 手机号码 手机 电话号码 电话 号码 热线 客服电话 客服热线 服务热线
    座机 传真 拨打 致电 来电 呼叫 打 联系电话 Tel TEL tel 短号 分行号 网点号 合同号
    保单号 发票号 发票代码 税号 报名号 准考证号 考号 登记号 登机口 柜台 窗口 桌号 台号
    No. NO. No 状态码 错误码 HTTP 报错 客服 基金 住 住在 入住
    """
)
# Cues of a number to dial (拨打12320, 热线 95598): a measure word after it makes it a
# quantity only if calls are counted or timed with it (拨打了3次, 通话 5 分钟); any other
# word after it is the next word (拨打12320卫生热线).
DIAL_CUES = words(
    """
    拨打 致电 呼叫 来电 回拨 热线 电话 号码 服务热线 客服热线 客服电话 服务电话 投诉电话
    咨询电话 举报电话 报修电话 求助电话 急救电话 报警电话 联系电话 热线电话 值班电话 客服
    """
)
CALL_MEASURES = frozenset(
    words("次 遍 通 个 分钟 秒 秒钟 小时 天 元 块 块钱 毛 角 多 余 条 位 人 名")
)
# Words after a room number that name it, though they may also count (612床, 302室).
ROOM_WORDS = frozenset(words("床 室 房"))

# After the number: "302房间", "8080端口", "G1234次".
CODE_CUES_AFTER = words(
    "房间 房 号房 室 端口 次列车 次高铁 次动车 航班 登机口 错误 报错 页面 会议室 教室 办公室 病房 "
    "诊室 实验室 包厢 宿舍 寝室 机房"
)

# Service numbers read as digits wherever they stand alone (not before a measure word).
SERVICE_NUMBERS = frozenset(
    words(
        """
    10000 10001 10010 10011 10050 10086 110 112 114 119 120 12110 122 12306 12315 12320
    12333 12345 12348 12355 12358 12365 12366 12369 12395 12580 95017 95105 95113 95118
    95188 95306 95500 95508 95510 95511 95512 95516 95518 95519 95522 95528 95533 95555
    95558 95559 95561 95566 95567 95568 95577 95588 95595 95598 95599 96777
        """
    )
)
# Numbers that name something, as they are said (六一八, 九八五, 二幺幺).
LABELS = {
    "618": "六一八", "520": "五二零", "521": "五二一", "315": "三一五", "818": "八一八",
    "985": "九八五", "211": "二幺幺", "996": "九九六", "955": "九五五", "404": "四零四",
    "502": "五零二", "503": "五零三", "12306": "幺二三零六", "12315": "幺二三幺五",
}  # fmt: skip
# Generations (九五后, 零零后) before 后 or 前.
GENERATIONS = frozenset(
    ["50", "55", "60", "65", "70", "75", "80", "85", "90", "95", "00", "05", "10", "15", "20"]
)
# Named days written with a number: said as the set phrase.
NAMED_DAYS = {"双11": "双十一", "双12": "双十二", "双十一": "双十一", "3·15": "三一五",
              "3.15": "三一五", "5·20": "五二零", "6·18": "六一八"}  # fmt: skip

# Cues of a score or a ratio before "3:2" (else it is a time when it can be one).
SCORE_CUES = words(
    """
    比分 比例 比率 比值 配比 战胜 击败 打败 获胜 胜 负 赢 输 战平 逆转 大比分 总比分 比赛 拿下
    落后 领先 以 屏幕比例 长宽比 宽高比 画幅 兑 兑换 汇率 杠杆 赔率 胜率 净胜
    """
)
# A match in the clause before "3-1" makes it a score (第二局…打到了 11-9, 比赛最后 98-95);
# ranges elsewhere stay ranges (3-5组, 比赛时间 3-4 小时: a measure word after).
MATCH_CUES = words(
    """
    比分 比赛 赛 决赛 半决赛 对阵 对手 主队 客队 主场 客场 半场 上半场 下半场 全场 局 盘 决胜局
    决胜盘 抢七 打到 打成 战成 踢成 踢到 最终 两队 双方
    """
)
# What a score is followed by (2-0 领先, 1-1 战平, 3-0 横扫).
SCORE_AFTER = words(
    """
    领先 落后 战平 战胜 获胜 取胜 险胜 完胜 大胜 力克 横扫 击败 打败 淘汰 不敌 负于 惜败 憾负 落败
    告负 败北 赢 输 胜 负 胜出 赢下 拿下 收官 逆转 绝杀 晋级 出局 握手言和 平局 告终 结束比赛
    """
)

# Things numbered with a dash (图3-1, 步骤 2-1, 第1-1关): a pair after them is no score.
NUMBERED_NOUNS = words(
    """
    第 图 表 例 式 公式 题 习题 练习 节 章 条 款 页 段 步 步骤 关 关卡 级 楼 栋 号 层 区 版 课 单元
    模块 编号 序号 附录 附件 方案 阶段 任务 项 班 组 排 座 房 室 车厢 站台 规则 条例 文件
    """
)

# Cues that make "3k", "5w" money or counts (月薪3k, 5w粉丝).
MAGNITUDE_CUES = words(
    """
    薪 月薪 年薪 底薪 时薪 日薪 薪资 薪水 工资 收入 月入 年入 预算 报价 价格 价 售价 标价 定价
    费 费用 成本 钱 赚 花 存 贷 借 欠 补贴 奖金 报销 房租 租金 押金 首付 月供 估值 融资
    市值 营收 利润 粉丝 播放 阅读 点赞 关注 订阅 销量 下载 用户 元 块 涨到 跌到 奖励 赏金
    租 月租 日租 年租 售价 总价 单价 均价 房价 车价 全款 贷款 存款 余额 身价 年终奖 税前 税后
    """
)
