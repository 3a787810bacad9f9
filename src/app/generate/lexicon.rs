//! The compiled-in vocabulary of the load generator: sentence templates per topic, the words
//! that fill their `{slots}`, and the decorations real Weibo posts carry. Written for this
//! project; no external corpus.

/// Topics a post is about; each has its own templates and hashtags.
pub(super) const TOPICS: &[Topic] = &[NEWS, WEATHER, SPORTS, PRODUCTS, DAILY];

/// One topic: full sentences, short posts and hashtags (all may contain slots).
pub(super) struct Topic {
    pub(super) sentences: &'static [&'static str],
    pub(super) short: &'static [&'static str],
    pub(super) hashtags: &'static [&'static str],
}

const NEWS: Topic = Topic {
    sentences: &[
        "{city}{line}今天{time}因为{cause}临时停运，{advice}",
        "据{media}报道，{city}将在{month}月起实行新的{policy}，涉及{num}万{people}",
        "{city}{district}发生一起{accident}，目前已造成{small}人受伤，原因正在调查中",
        "{media}消息：{city}{num}家{shop}被约谈，要求限期整改{problem}问题",
        "今年{city}的{indicator}同比增长{pct}，比去年同期高出不少",
        "{city}{district}新开通的{line}首日客流达到{num}万人次",
        "{city}宣布{month}月{day}日起{policy}正式实施，{people}可以到{office}办理",
        "{person_role}在{city}考察时强调，要把{goal}放在更加突出的位置",
        "刚刚{city}{district}突发{accident}，现场{scene}，请附近的朋友注意安全",
        "{media}调查发现，{problem}在{city}的{shop}里依然普遍存在",
        "{city}今年计划新建{small}所学校和{small}家医院，总投资{num}亿元",
        "关于{policy}的讨论越来越多，{city}的{people}普遍表示{attitude}",
        "{city}警方通报：一男子因{crime}被依法拘留{small}日",
        "{city}{district}的{landmark}将于{month}月{day}日起闭馆维修",
    ],
    short: &[
        "{city}又{accident}了",
        "{city}{line}停运了",
        "{policy}终于来了",
        "{city}{district}堵死了",
        "支持{policy}",
    ],
    hashtags: &[
        "{city}新闻",
        "{policy}",
        "{city}{line}",
        "关注{accident}",
        "今日热点",
    ],
};

const WEATHER: Topic = Topic {
    sentences: &[
        "{city}今天{weather}，最高气温{temp}度，{weather_advice}",
        "{city}气象台发布{color}{alert}预警，预计未来{small}小时有{weather}",
        "早上起来发现{city}{weather}了，{feeling_sentence}",
        "这{period}的{city}真是{weather_adj}，{weather_advice}",
        "{city}{time}突然{weather}，{scene_weather}",
        "天气预报说{city}明天{weather}转{weather}，最低气温{temp}度",
        "{city}的{season}来得太{speed}了，昨天还{weather_adj}今天就{weather_adj}",
        "{city}已经连续{small}天{weather}了，{feeling_sentence}",
        "{city}{district}{time}下了一场大{precip}，{scene_weather}",
        "终于等到{city}{weather}，{weather_advice}",
    ],
    short: &[
        "{city}{weather}了",
        "{city}好{weather_adj}",
        "又{weather}了{exclaim}",
        "{city}{season}真{weather_adj}",
        "今天{weather_adj}死了",
    ],
    hashtags: &[
        "{city}天气",
        "{city}{weather}",
        "{color}{alert}预警",
        "天气预报",
    ],
};

const SPORTS: Topic = Topic {
    sentences: &[
        "{team}{result}{team}，比分{small}比{small}，{sports_comment}",
        "{player}今天{performance}，{team}的球迷{fan_reaction}",
        "{league}第{small}轮，{team}主场迎战{team}，{sports_comment}",
        "{player}宣布{career}，{fan_reaction}",
        "{team}官方宣布签下{player}，合同为期{small}年",
        "今晚{league}{team}对{team}，{prediction}",
        "{player}在比赛第{minute}分钟{goal_event}，{sports_comment}",
        "{team}已经连续{small}场不胜，{coach_comment}",
        "看完{team}的比赛，{feeling_sentence}",
        "{league}积分榜{team}暂列第{small}，距离{team}只差{small}分",
    ],
    short: &[
        "{team}加油{exclaim}",
        "{player}太强了",
        "{team}{result}了",
        "{player}{goal_event}",
        "今晚看{league}",
    ],
    hashtags: &["{league}", "{team}", "{player}", "{team}vs{team}"],
};

const PRODUCTS: Topic = Topic {
    sentences: &[
        "刚入手了{brand}{product}，{product_comment}",
        "{brand}新款{product}今天发布，售价{price}元起，{price_comment}",
        "{shop_online}上{brand}{product}降到{price}元了，{buy_advice}",
        "用了{small}个月的{brand}{product}，{product_comment}",
        "{brand}{product}和{brand}{product}到底选哪个？{ask}",
        "排队{small}小时终于买到{brand}{product}，{feeling_sentence}",
        "{brand}{product}的{part}{defect}，客服说要寄回{city}检测",
        "{shop_online}{sale}，{brand}{product}只要{price}元，{buy_advice}",
        "{person}送了我一个{brand}{product}，{product_comment}",
        "{brand}官方回应{product}{defect}问题，称将免费更换",
    ],
    short: &[
        "想买{brand}{product}",
        "{brand}{product}到了",
        "{product}坏了{exclaim}",
        "{brand}{product}真香",
        "剁手了{brand}{product}",
    ],
    hashtags: &[
        "{brand}{product}",
        "{brand}",
        "{sale}",
        "{shop_online}{sale}",
    ],
};

const DAILY: Topic = Topic {
    sentences: &[
        "{time}和{person}去{place}吃了{food}，{food_comment}",
        "{time}{daily_action}，{feeling_sentence}",
        "{person}今天{person_event}，{feeling_sentence}",
        "周末打算去{place}{leisure}，有没有一起的？",
        "在{city}{daily_action}的第{small}天，{feeling_sentence}",
        "{time}在{place}排了{small}分钟的队，就为了一份{food}",
        "加班到{hour}点，{daily_action}，{feeling_sentence}",
        "{person}做的{food}是世界上最好吃的，{food_comment}",
        "{time}{commute}，{scene_daily}",
        "又是{daily_action}的一天，{feeling_sentence}",
        "终于把{chore}做完了，{feeling_sentence}",
        "养的{pet}今天{pet_event}，{feeling_sentence}",
    ],
    short: &[
        "好想吃{food}",
        "{time}{daily_action}",
        "{pet}{pet_event}",
        "想去{place}{leisure}",
        "终于{daily_done}了",
        "{feeling_short}",
        "{food}{food_short}",
    ],
    hashtags: &[
        "{food}",
        "晒晒我的{pet}",
        "{city}美食",
        "打工人",
        "周末去哪儿",
    ],
};

/// Sentences any topic can append (heavy copies add commentary; long posts pad with them).
pub(super) const COMMENTS: &[&str] = &[
    "大家怎么看？",
    "{feeling_sentence}",
    "说实话{attitude}",
    "转给需要的朋友",
    "有知道内情的朋友吗？",
    "希望{goal}能越来越好",
    "{person}说{attitude}",
    "这件事{comment_view}",
    "我{time}才看到这条消息",
    "先收藏了，{time}再细看",
    "评论区的朋友说得对，{comment_view}",
    "不知道{city}那边怎么样",
];

/// Whole short posts that normalize to nothing (emoticons only, bare reposts).
pub(super) const EMPTY_POSTS: &[&str] = &[
    "[哈哈]",
    "[泪][泪]",
    "[赞][赞][赞]",
    "😂😂😂",
    "[doge]",
    "！！！",
    "[抓狂]",
    "👍",
    "[心]",
    "...",
];

/// Comments in repost chains (`//@user:comment`).
pub(super) const REPOST_COMMENTS: &[&str] = &[
    "转发微博",
    "转",
    "哈哈哈哈",
    "太真实了",
    "马克",
    "同意",
    "赞",
    "可怕",
    "顶",
    "说得好",
    "mark",
    "真的假的",
    "笑死",
    "心疼",
    "围观",
    "支持",
    "[哈哈]",
    "[泪]",
    "学到了",
    "厉害了",
];

/// Emoticon names written as `[name]`.
pub(super) const EMOTICONS: &[&str] = &[
    "哈哈", "嘻嘻", "泪", "怒", "赞", "心", "偷笑", "doge", "允悲", "笑cry", "抓狂", "鼓掌", "衰",
    "酷", "吃惊", "可怜", "害羞", "挖鼻", "good", "给力", "微笑", "思考", "汗", "晕",
];

/// Emoji.
pub(super) const EMOJI: &[&str] = &[
    "😂", "👍", "😭", "🙏", "💕", "🔥", "😊", "🤣", "😅", "💪", "🎉", "😡", "🌧", "🌞", "⚽",
];

/// User-name parts for `@mentions` and repost chains.
pub(super) const NAME_HEADS: &[&str] = &[
    "小", "大", "老", "阿", "胖", "猫", "鱼", "星", "月", "风", "糖", "橙子", "柠檬", "咸鱼",
    "路人", "吃货", "追风", "Lucky", "Tom", "Coco",
];
/// Second part of user names.
pub(super) const NAME_TAILS: &[&str] = &[
    "王",
    "李",
    "张",
    "刘",
    "陈",
    "妹",
    "哥",
    "酱",
    "君",
    "同学",
    "先生",
    "小姐",
    "日记",
    "的窝",
    "爱吃鱼",
    "不睡觉",
    "在路上",
    "2012",
    "_",
    "99",
    "love",
    "酱酱",
];

/// Verified-account mentions.
pub(super) const ACCOUNTS: &[&str] = &[
    "人民日报",
    "央视新闻",
    "{city}发布",
    "{city}交警",
    "{city}气象",
    "{brand}官方微博",
    "{team}俱乐部",
    "新浪体育",
    "头条新闻",
    "微博搞笑排行榜",
];

/// A filler word for `{slot}`; `None` for an unknown slot name.
#[rustfmt::skip]
pub(super) fn slot(name: &str) -> Option<&'static [&'static str]> {
    Some(match name {
        "city" => &[
            "北京", "上海", "广州", "深圳", "成都", "杭州", "武汉", "西安", "南京", "重庆", "天津",
            "苏州", "长沙", "郑州", "青岛", "沈阳", "厦门", "昆明", "大连", "哈尔滨", "合肥",
            "济南", "福州", "南宁", "贵阳", "兰州", "太原", "石家庄", "宁波", "无锡", "佛山",
            "东莞", "珠海", "三亚", "拉萨", "乌鲁木齐", "呼和浩特", "长春", "南昌", "海口",
        ],
        "district" => &[
            "朝阳区", "浦东新区", "天河区", "南山区", "武侯区", "西湖区", "江汉区", "雁塔区",
            "鼓楼区", "渝中区", "和平区", "高新区", "开发区", "老城区", "东城区", "滨江区",
        ],
        "line" => &[
            "地铁一号线", "地铁二号线", "地铁四号线", "地铁十号线", "机场快线", "环线公交",
            "轻轨三号线", "有轨电车", "城际铁路", "高铁站", "长途汽车站", "过江隧道",
        ],
        "time" => &[
            "今天早上", "昨天晚上", "中午", "刚才", "下午", "凌晨", "傍晚", "今晚", "周一早上",
            "周末", "前天", "上班路上", "下班的时候", "午休时",
        ],
        "cause" => &[
            "设备故障", "信号问题", "暴雨", "大风", "施工", "突发客流", "停电", "大雾",
        ],
        "advice" => &[
            "上班的朋友们记得绕行", "请大家提前规划路线", "出门前记得看看通知", "建议改乘公交",
            "大家互相转告一下", "估计要迟到了",
        ],
        "media" => &[
            "新华社", "央视", "澎湃新闻", "本地电视台", "晚报", "新京报", "财新网",
        ],
        "month" => &[
            "一", "二", "三", "四", "五", "六", "七", "八", "九", "十", "十一", "十二",
        ],
        "day" => &[
            "1", "5", "8", "10", "12", "15", "18", "20", "25", "28", "30",
        ],
        "policy" => &[
            "垃圾分类", "限行政策", "住房公积金新规", "医保异地结算", "共享单车管理办法",
            "电动车上牌", "落户政策", "学区划分方案", "停车收费标准", "夜市管理规定",
            "外卖包装新规", "养犬管理条例",
        ],
        "num" => &[
            "3", "12", "25", "40", "56", "80", "120", "150", "300", "600", "1200",
        ],
        "small" => &[
            "2", "3", "4", "5", "6", "7", "8", "9", "10", "12", "15", "20",
        ],
        "pct" => &[
            "3.2%", "5.6%", "7.1%", "8.4%", "10.5%", "12.3%", "15%", "21.7%",
        ],
        "people" => &[
            "市民", "居民", "上班族", "学生", "老人", "外卖小哥", "司机", "商户", "家长",
        ],
        "accident" => &[
            "交通事故", "火灾", "水管爆裂", "路面塌陷", "连环追尾", "电梯故障", "燃气泄漏",
            "广告牌坠落", "大面积停电",
        ],
        "shop" => &[
            "餐馆", "超市", "奶茶店", "健身房", "培训机构", "网吧", "药店", "菜市场",
        ],
        "problem" => &[
            "食品安全", "虚假宣传", "乱收费", "卫生不达标", "预付卡跑路", "消防隐患",
        ],
        "indicator" => &[
            "GDP", "房价", "人均收入", "旅游收入", "新车销量", "出生人口", "快递量",
        ],
        "office" => &["街道办", "社区服务中心", "政务大厅", "派出所", "网上平台"],
        "person_role" => &["市长", "省委书记", "专家", "院士", "发言人"],
        "goal" => &[
            "民生", "教育", "环境保护", "公共交通", "食品安全", "老人的生活",
        ],
        "scene" => &[
            "浓烟很大", "警车已经到了", "围了很多人", "交通完全瘫痪", "消防车正在赶来",
        ],
        "attitude" => &[
            "支持", "不太理解", "有点担心", "觉得挺好", "早就该这样了", "还要再观察", "非常失望",
            "举双手赞成",
        ],
        "crime" => &[
            "酒驾", "高空抛物", "偷电动车", "网络造谣", "冒充快递员诈骗", "插队打人",
        ],
        "landmark" => &["博物馆", "图书馆", "科技馆", "美术馆", "体育中心", "动物园"],
        "weather" => &[
            "下雪", "暴雨", "大雾", "晴", "多云", "雷阵雨", "冰雹", "沙尘暴", "小雨", "大风",
            "阴天", "雨夹雪",
        ],
        "weather_adj" => &[
            "热", "冷", "闷", "干燥", "潮湿", "舒服", "晒", "阴冷", "凉快",
        ],
        "temp" => &[
            "-8", "-3", "0", "5", "12", "18", "23", "27", "31", "35", "38", "40",
        ],
        "weather_advice" => &[
            "出门记得带伞", "注意防暑降温", "大家多穿点衣服", "开车慢一点", "少出门为好",
            "记得涂防晒", "晾的衣服赶紧收", "老人小孩注意保暖",
        ],
        "color" => &["蓝色", "黄色", "橙色", "红色"],
        "alert" => &["暴雨", "高温", "寒潮", "大风", "大雾", "道路结冰", "雷电"],
        "period" => &["几天", "一周", "个月", "个冬天", "个夏天"],
        "scene_weather" => &[
            "路上的人都在跑", "街道都成了河", "好多人被困在地铁站", "车窗上全是冰",
            "天黑得像晚上一样", "树都被吹倒了",
        ],
        "season" => &["春天", "夏天", "秋天", "冬天", "梅雨季"],
        "speed" => &["快", "突然", "晚", "猛"],
        "precip" => &["雨", "雪", "冰雹"],
        "team" => &[
            "国足", "广州队", "上海海港", "北京国安", "山东泰山", "成都蓉城", "皇马", "巴萨",
            "曼联", "利物浦", "拜仁", "湖人", "勇士", "辽宁男篮", "广东男篮", "中国女排",
        ],
        "result" => &["战胜", "逼平", "惨败给", "绝杀", "逆转", "输给", "完胜"],
        "sports_comment" => &[
            "这场比赛太精彩了", "裁判的判罚引发争议", "下半场完全被压着打", "门将表现神勇",
            "看得我心脏病都要犯了", "这个结果大家满意吗", "主教练的换人太保守",
        ],
        "player" => &[
            "武磊", "梅西", "C罗", "姚明", "詹姆斯", "库里", "朱婷", "郎平", "苏炳添", "谷爱凌",
            "全红婵", "孙颖莎", "樊振东", "易建联", "张玉宁",
        ],
        "performance" => &[
            "独得40分", "梅开二度", "状态低迷", "受伤离场", "上演帽子戏法", "完美发挥",
        ],
        "fan_reaction" => &[
            "球迷们都沸腾了", "大家都哭了", "评论区已经吵翻了", "网友纷纷表示不敢相信",
            "无数人为他点赞",
        ],
        "league" => &[
            "中超", "英超", "西甲", "NBA", "CBA", "欧冠", "世界杯预选赛", "亚冠",
        ],
        "career" => &["退役", "转会", "续约", "伤愈复出", "加盟新球队"],
        "prediction" => &["我赌主队赢", "估计又是平局", "希望别再输了", "必须拿下三分"],
        "minute" => &["3", "17", "28", "45", "59", "71", "88", "90"],
        "goal_event" => &["进球了", "点球罚丢了", "吃到红牌", "助攻破门", "头球扳平"],
        "coach_comment" => &[
            "主教练压力山大", "是时候换帅了", "球员们需要反思", "更衣室出问题了吧",
        ],
        "brand" => &[
            "苹果", "华为", "小米", "OPPO", "vivo", "荣耀", "联想", "戴尔", "索尼", "大疆", "耐克",
            "安踏", "优衣库", "宜家", "戴森", "美的", "格力", "特斯拉", "比亚迪", "蔚来",
        ],
        "product" => &[
            "手机", "笔记本", "平板", "耳机", "手表", "相机", "运动鞋", "羽绒服", "吸尘器", "空调",
            "电动车", "路由器", "显示器", "键盘", "电饭煲", "iPhone", "MacBook",
        ],
        "product_comment" => &[
            "手感真的很好", "续航比想象的差", "性价比超高", "做工有点粗糙", "颜值很能打",
            "系统有点卡", "拍照效果惊艳", "完全是智商税", "用起来非常顺手", "充电速度很快",
        ],
        "price" => &[
            "199", "299", "599", "999", "1299", "2499", "3999", "5999", "8999",
        ],
        "price_comment" => &["不算便宜", "良心价", "贵得离谱", "等降价再说", "值得入手"],
        "shop_online" => &["淘宝", "京东", "拼多多", "天猫", "抖音商城", "苏宁"],
        "buy_advice" => &[
            "想买的赶紧", "手慢无", "别买，等下一代", "学生党冲", "建议再等等",
        ],
        "ask" => &["求推荐", "纠结死了", "在线等挺急的", "用过的说说"],
        "part" => &["屏幕", "电池", "摄像头", "充电口", "鞋底", "拉链"],
        "defect" => &["出现裂痕", "发烫严重", "突然黑屏", "开胶了", "频繁断连"],
        "sale" => &["双十一", "618大促", "年货节", "秒杀活动", "清仓特卖"],
        "person" => &[
            "老妈", "老爸", "同事", "室友", "男朋友", "女朋友", "闺蜜", "老板", "表姐", "同学",
            "邻居", "奶奶",
        ],
        "place" => &[
            "公司楼下", "商场", "夜市", "海边", "老街", "公园", "电影院", "咖啡馆", "郊区", "古镇",
            "山上", "学校门口",
        ],
        "food" => &[
            "火锅", "烧烤", "小龙虾", "麻辣烫", "螺蛳粉", "煎饼果子", "奶茶", "烤鸭", "肠粉",
            "热干面", "肉夹馍", "酸菜鱼", "饺子", "生煎包", "臭豆腐", "冰淇淋",
        ],
        "food_comment" => &[
            "味道真的绝了", "排队一小时值了", "有点失望", "辣得我眼泪都出来了", "价格还挺实惠",
            "下次还来", "吃完胖了三斤",
        ],
        "food_short" => &["yyds", "太香了", "绝了", "好难吃", "吃撑了"],
        "daily_action" => &[
            "加班", "挤地铁", "健身", "跑步", "复习考试", "带娃", "搬家", "面试", "减肥",
            "早起打卡", "收拾房间", "写论文",
        ],
        "daily_done" => &["下班", "放假", "考完", "发工资", "搬完家", "交稿"],
        "feeling_sentence" => &[
            "心情好极了", "整个人都不好了", "感觉被掏空", "真是醉了", "开心到飞起", "累成狗",
            "有点小感动", "生活不易啊", "幸福来得太突然", "我选择躺平", "真的哭死",
            "今天也要加油鸭",
        ],
        "feeling_short" => &[
            "好累啊", "开心！", "好困", "想放假", "无聊死了", "饿了", "emo了",
        ],
        "person_event" => &[
            "过生日", "升职了", "结婚了", "出国了", "生病住院了", "考上研究生了",
        ],
        "leisure" => &["露营", "爬山", "拍照", "看展", "骑车", "钓鱼", "逛街"],
        "hour" => &["9", "10", "11", "12", "凌晨1", "凌晨2", "凌晨3"],
        "commute" => &[
            "挤地铁", "骑共享单车上班", "打车", "坐公交", "开车堵在高架上",
        ],
        "scene_daily" => &[
            "车厢里挤得脚都不着地", "路上全是人", "司机一直在打电话", "前面的车半天不动",
            "一路绿灯心情大好",
        ],
        "chore" => &["大扫除", "年终总结", "毕业论文", "装修", "报税", "作业"],
        "pet" => &["猫", "狗", "仓鼠", "兔子", "鹦鹉", "金毛", "柯基", "橘猫"],
        "pet_event" => &[
            "拆家了", "生病了", "学会握手了", "又胖了", "偷吃东西", "离家出走了",
        ],
        "exclaim" => &["！", "！！", "啊", "呀", "啦！"],
        "comment_view" => &[
            "值得深思", "细思极恐", "没那么简单", "还是要看后续", "太让人寒心了", "必须严查",
            "说明了很多问题",
        ],
        _ => return None,
    })
}

/// Everyday two-character words for free chatter clauses, the long tail that makes posts differ.
pub(super) const WORDS: &str = "\
今天明天昨天早上晚上中午周末假期时间最近以前以后刚才马上突然终于其实确实真的可能应该\
已经还是只是就是但是因为所以如果虽然不过而且然后大家朋友同学老师家人父母孩子宝宝领导\
同事邻居网友粉丝博主记者医生司机师傅阿姨叔叔爷爷奶奶哥哥姐姐弟弟妹妹男生女生自己别人\
工作上班下班加班开会出差面试辞职工资奖金房租房价买房租房装修搬家学习考试作业论文毕业\
开学放假旅游旅行出门回家吃饭喝水睡觉起床洗澡做饭跑步健身游泳散步逛街购物聊天发呆思考\
手机电脑网络视频直播音乐电影电视游戏小说照片相册评论点赞转发关注热搜新闻消息通知文章\
城市农村小区街道马路公园商场超市医院学校银行车站机场地铁公交高铁飞机汽车单车外卖快递\
天气阳光月亮星星大海森林花园草地雨伞衣服裤子鞋子帽子围巾眼镜钱包钥匙杯子桌子椅子窗户\
开心难过生气害怕担心紧张激动感动温暖幸福孤独无聊疲惫轻松舒服难受委屈后悔满意失望期待\
喜欢讨厌希望相信觉得知道认为发现记得忘记明白理解支持反对同意拒绝坚持放弃努力奋斗改变\
重要简单复杂方便麻烦安全危险干净漂亮可爱厉害优秀普通特别奇怪正常认真随便热闹安静新鲜\
问题办法机会经验能力压力动力目标计划梦想回忆故事秘密心情感觉态度习惯性格身体健康生活\
世界社会国家历史文化经济科技环境教育医疗交通安全法律市场价格质量服务品牌产品广告活动\
早餐午餐晚饭夜宵水果蔬菜米饭面条包子鸡蛋牛奶咖啡啤酒零食蛋糕巧克力西瓜苹果橘子葡萄";
