"""Word lists for the message grammars: concrete, everyday and easy to say in emoji.

Each list fills one `{slot}` of a template in grammar.py. Items may contain slots
themselves. Phrases carry their own articles and tense so templates never need agreement
rules; every verb phrase here is past tense, first person, or an -ing form as its name says.
"""

SLOTS: dict[str, list[str]] = {
    # --- people ------------------------------------------------------------------------
    "person": [
        "my sister", "my brother", "my mom", "my dad", "my grandma", "my grandpa", "my best friend",
        "my roommate", "my boss", "my neighbor", "my cousin", "my aunt", "my uncle", "my daughter",
        "my son", "my partner", "my coworker", "my little brother", "my niece", "my nephew",
        "our coach", "my teacher", "my husband", "my wife", "my girlfriend", "my boyfriend",
    ],
    "addressee": [
        "friend", "buddy", "Mom", "Dad", "Grandma", "bestie", "team", "everyone", "neighbor",
        "sis", "bro", "love", "you two", "Coach", "my dear", "champ",
    ],
    # --- events ------------------------------------------------------------------------
    "good_event": [
        "got promoted", "passed my driving test", "finished my first marathon", "adopted a puppy",
        "got engaged", "baked my first loaf of sourdough", "got the job at the bakery", "won the pub quiz",
        "found my lost keys", "booked flights to Japan", "got tickets to the concert", "finished my thesis",
        "caught a huge fish at the lake", "learned to ride a bike", "scored the winning goal",
        "moved into my new apartment", "picked the first tomatoes from the garden", "got a raise",
        "paid off my student loans", "finished the puzzle", "ran five kilometers without stopping",
        "got an A on my chemistry exam", "cooked dinner for the whole family", "saw a whale on the ferry",
        "climbed to the top of the mountain", "fixed the leaky faucet", "won the chess tournament",
        "got my cast off", "finished painting the bedroom", "made it to the final round",
        "sold my first painting", "hit a home run", "got into art school", "learned three chords on the guitar",
        "bought my first car", "beat my personal best at the pool", "got my braces off",
        "finished knitting a scarf", "saw the northern lights", "became an aunt",
    ],
    "bad_event": [
        "missed the last train", "spilled coffee all over my laptop", "lost my wallet", "cracked my phone screen",
        "burned the dinner", "got a flat tire", "failed the driving test", "caught a cold",
        "got stuck in traffic for two hours", "forgot my umbrella and got soaked", "dropped my ice cream",
        "locked myself out of the house", "overslept and missed the meeting", "sprained my ankle",
        "lost the match in the last minute", "broke my favorite mug", "missed my flight",
        "got a parking ticket", "forgot my best friend's birthday", "stepped in a puddle on the way to work",
        "ran out of gas on the highway", "burned my tongue on the soup", "lost my luggage at the airport",
        "deleted my essay by accident", "got sunburned at the beach", "stubbed my toe on the bed",
    ],
    "person_good_event": [
        "had a baby girl", "graduated from college", "won a gold medal", "opened a little coffee shop",
        "started a new job", "learned to swim", "got married on the beach", "ran the city marathon",
        "won the baking contest", "got a scholarship", "came home from the hospital", "passed the bar exam",
        "caught the bouquet at the wedding", "retired after forty years", "built a treehouse",
        "finished chemo", "bought a house by the sea", "lost a baby tooth",
    ],
    "bad_news": [
        "my flight got cancelled", "the heating broke again", "the dog ate my sandwich", "it rained all weekend",
        "the bus never came", "the concert was sold out", "my laptop died during the presentation",
        "the wifi is down again", "our picnic got rained out", "the restaurant lost our reservation",
        "the cat knocked my plant off the shelf", "the power went out during the storm",
        "my package got lost in the mail", "the ferry was delayed for hours",
    ],
    # --- feelings ----------------------------------------------------------------------
    "happy_feeling": ["happy", "excited", "proud", "thrilled", "grateful", "relieved", "over the moon", "pumped", "delighted"],
    "sad_feeling": ["sad", "frustrated", "exhausted", "annoyed", "heartbroken", "stressed", "nervous", "anxious", "gutted", "lonely"],
    "degree": ["so", "really", "super", "incredibly", "honestly", "totally", "a little", "kind of"],
    "happy_action": ["smiling", "dancing around the kitchen", "jumping up and down", "laughing", "grinning", "singing in the shower"],
    "reaction": [
        "Best day ever!", "I could cry.", "Still shaking.", "Pinch me.", "What a week.", "Time to celebrate!",
        "I need a nap.", "Send snacks.", "Life is good.", "Can't complain.", "Wish me luck.", "Ugh.",
    ],
    # --- time --------------------------------------------------------------------------
    "past_time": ["today", "this morning", "last night", "yesterday", "this afternoon", "on Saturday", "last weekend", "an hour ago", "on my birthday"],
    "future_time": ["tomorrow", "tonight", "this weekend", "next week", "on Friday", "this summer", "in the morning", "after work", "on Sunday"],
    "day": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
    "upcoming": [
        "the job interview", "my first day at the new school", "the trip to Italy", "the exam on Friday",
        "the wedding", "moving to a new city", "the big game", "my piano recital", "the dentist appointment",
        "the camping trip", "meeting her parents", "the first day of spring", "the holidays",
    ],
    # --- places and scenes -------------------------------------------------------------
    "place": [
        "the beach", "the park", "the mountains", "the city", "the lake", "the farm", "the harbor",
        "the old town", "the forest", "the campsite", "the market", "the stadium", "the train station",
        "the village", "the river", "the desert", "the ski slope", "the garden", "the airport",
    ],
    "city": ["Paris", "Tokyo", "Rome", "London", "New York", "Mexico City", "Sydney", "Berlin", "Cairo", "Rio", "Toronto", "Seoul", "Barcelona", "Istanbul"],
    "country": ["Japan", "Italy", "Mexico", "Brazil", "France", "Canada", "Greece", "India", "Kenya", "Iceland", "Spain", "Thailand", "Australia", "Peru"],
    "weather_scene": [
        "Snow is falling softly", "The sun is setting", "A thunderstorm is coming", "Fog hangs low",
        "A rainbow just appeared", "The full moon is rising", "Heavy rain is drumming", "The stars are out",
        "Autumn leaves are blowing", "A warm breeze is blowing", "Dark clouds are gathering",
    ],
    "scene_detail": [
        "kids are building a snowman", "a dog is chasing seagulls", "someone is playing the guitar",
        "an old man is feeding the pigeons", "the cafe smells like fresh bread", "boats are bobbing in the water",
        "a couple is dancing under the lights", "the street vendors are grilling corn", "a cat is asleep on a car roof",
        "fireworks are lighting up the sky", "everyone is running for cover", "the bells are ringing",
        "a kid is flying a red kite", "the market stalls are full of oranges", "a horse is grazing by the fence",
    ],
    "animal": [
        "cat", "dog", "fox", "squirrel", "rabbit", "owl", "duck", "horse", "cow", "goat", "parrot",
        "turtle", "frog", "deer", "penguin", "bee", "butterfly", "crab", "dolphin", "hedgehog", "puppy", "kitten",
    ],
    "animal_action": [
        "is sleeping", "is chasing its tail", "is splashing around", "is eating a carrot", "is sunbathing",
        "keeps staring at me", "is hiding", "just stole a sandwich", "is playing with a ball of yarn",
        "is napping in a cardboard box", "is swimming in circles", "is hopping across the lawn",
    ],
    "location_phrase": [
        "on the windowsill", "in the garden", "under the table", "by the pond", "on the porch", "in the snow",
        "on the beach", "next to the fireplace", "on my keyboard", "in the middle of the road", "on the balcony",
    ],
    "background_detail": [
        "rain taps on the window", "the kettle starts to whistle", "the radio plays old jazz",
        "the sun comes through the trees", "thunder rumbles far away", "the neighbors are having a barbecue",
        "the church bells ring", "a train rolls past", "the baby naps upstairs", "the snow keeps falling",
    ],
    "view": ["the waves", "the sunset", "the rain", "the snow fall", "the boats in the harbor", "the city lights", "the birds", "the clouds drift by", "the leaves fall"],
    "drink": ["hot coffee", "cup of tea", "cold lemonade", "glass of wine", "mug of hot chocolate", "smoothie", "beer", "tall iced latte", "bubble tea"],
    "crowd_state": ["packed", "completely empty", "buzzing", "so quiet", "full of tourists", "decorated for the festival", "covered in snow"],
    # --- food and things ---------------------------------------------------------------
    "food": [
        "pizza", "sushi", "tacos", "ramen", "pineapple on pizza", "dark chocolate", "avocado toast", "pancakes",
        "spicy curry", "ice cream", "fresh croissants", "burgers", "popcorn", "salad", "pasta", "dumplings",
        "cheesecake", "watermelon", "hot dogs", "fries", "strawberries", "donuts", "cereal for dinner", "soup",
    ],
    "grocery": ["milk", "eggs", "bread", "bananas", "coffee", "cheese", "apples", "rice", "tomatoes", "carrots", "butter", "lemons", "chocolate", "cat food", "flowers", "onions"],
    "thing": [
        "summer", "winter", "rainy days", "road trips", "camping", "morning runs", "board games", "video games",
        "jazz", "karaoke", "yoga", "gardening", "museums", "cats", "dogs", "the beach", "snow", "thunderstorms",
        "roller coasters", "online meetings", "early mornings", "long walks", "reality TV", "horror movies",
        "puzzles", "baking", "fishing", "skiing", "soccer", "basketball", "tennis", "vinyl records", "cruises",
    ],
    "opinion_adj": [
        "the best thing ever", "seriously underrated", "totally overrated", "way better than people say",
        "honestly kind of boring", "pure happiness", "a disaster", "worth every penny", "my guilty pleasure",
    ],
    "weather_day": ["rainy", "cold", "hot", "snowy", "lazy", "sunny", "windy", "gloomy"],
    "activity": [
        "hiking", "swimming", "reading in bed", "cooking", "baking cookies", "dancing", "cycling", "fishing",
        "painting", "playing chess", "watching movies", "playing soccer", "camping", "running", "skating",
        "gardening", "taking photos", "playing the piano", "surfing", "going to concerts",
    ],
    # --- requests ----------------------------------------------------------------------
    "request_action": [
        "send me the report", "call me back", "water the plants", "feed the cat", "pick me up from the station",
        "book a table for four", "bring the snacks", "check the oven", "walk the dog", "lend me your charger",
        "save me a seat", "take out the trash", "grab some coffee for the team", "print the tickets",
        "help me move the couch", "text me when you land", "fix the printer", "order the pizza",
    ],
    "deadline": ["tonight", "by noon", "before the meeting", "when you get a chance", "by Friday", "after lunch", "first thing tomorrow", "before it rains", "in five minutes", "today"],
    "plan_activity": [
        "grab tacos", "go to the beach", "watch a movie", "go hiking", "have a picnic", "go bowling",
        "go to the farmers market", "play tennis", "bake a cake", "go camping", "see the fireworks",
        "visit the zoo", "go skiing", "have a game night", "get ice cream", "go to the concert",
    ],
    "chore": ["do the dishes", "walk the dog", "feed the fish", "clean your room", "buy some milk", "charge the car", "lock the door", "turn off the lights", "pack your bags", "water the garden"],
    "event_time": ["the guests arrive", "we leave", "dinner", "the game starts", "bedtime", "your mom gets home", "the party", "the storm hits"],
    "favor": [
        "watching my cat while I'm away", "picking up my kids from school", "proofreading my essay",
        "lending me your tent", "driving me to the airport", "helping me paint the fence",
        "taking a photo of us", "keeping an eye on my bag",
    ],
    # --- social ------------------------------------------------------------------------
    "occasion": ["birthday", "anniversary", "new year", "graduation day", "Valentine's Day", "Mother's Day", "Father's Day", "Halloween", "Thanksgiving", "retirement", "wedding day"],
    "wish": [
        "Hope you have a wonderful day!", "Enjoy the cake!", "Have the best time!", "Sending hugs!",
        "Cheers to many more!", "Party hard!", "Love you lots!", "Enjoy every minute!", "Can't wait to celebrate with you!",
    ],
    "achievement": ["the new job", "the promotion", "the baby", "your graduation", "the engagement", "the new house", "winning the race", "passing the exam", "the wedding", "your first marathon"],
    "favor_noun": ["the flowers", "the birthday card", "dinner last night", "the ride home", "the lovely gift", "your help with the move", "the cookies", "listening to me", "the advice"],
    "social_mistake": ["missed your call", "was late again", "forgot to text you back", "couldn't make it to the party", "ate the last slice of cake"],
    "social_plan": ["Coffee soon?", "Let's catch up this weekend.", "Dinner next week?", "Call me when you're free.", "Come visit soon!"],
    # --- questions ---------------------------------------------------------------------
    "task": [
        "boil an egg", "learn to swim", "grow tomatoes", "train a puppy", "bake bread", "fix a bike tire",
        "make pancakes", "learn the guitar", "get to the airport", "brew good coffee", "plant a tree",
        "run a marathon", "paint a room", "make sushi at home", "get rid of hiccups", "keep basil alive",
    ],
    "animals_plural": ["cats", "dogs", "birds", "cows", "bees", "owls", "penguins", "frogs", "whales", "ducks", "horses", "bats", "elephants", "squirrels"],
    "animal_behavior": [
        "sleep so much", "purr", "migrate south", "howl at night", "like to swim", "hibernate",
        "sing in the morning", "eat grass", "live so long", "stand on one leg", "hide nuts",
    ],
    "weather_verb": ["rain", "snow", "be sunny", "be windy", "storm", "be hot"],
    "venue": ["museum", "library", "pool", "bakery", "post office", "zoo", "gym", "pharmacy", "farmers market", "bank"],
    "item": ["a good bakery", "a pharmacy", "fresh flowers", "a charging station", "cheap sushi", "a bike shop", "vegan food", "a quiet cafe"],
    "landmark": ["the station", "the park", "the hotel", "the beach", "downtown", "the university", "the airport"],
    "fact_topic": [
        "the moon", "volcanoes", "rainbows", "honey", "the pyramids", "lightning", "coffee", "chocolate",
        "the ocean", "dinosaurs", "earthquakes", "the sun", "snowflakes", "tea", "rice", "bananas",
    ],
    "invention": ["the telephone", "the light bulb", "pizza", "the bicycle", "chocolate chip cookies", "the airplane", "the piano", "the camera", "the ice cream cone", "the internet", "the printing press", "the compass", "the sandwich", "the guitar"],
    # --- abstract ----------------------------------------------------------------------
    "abstract_noun": ["time", "love", "hope", "friendship", "grief", "success", "freedom", "patience", "home", "change", "courage", "memory", "kindness", "fear", "happiness", "growing up"],
    "metaphor": [
        "a river that never stops", "a seed that needs water", "a candle in a dark room", "a long road with no map",
        "a puzzle with missing pieces", "a storm that passes", "a garden you tend every day", "a song you can't forget",
        "a mountain you climb slowly", "a bridge between two people", "the tide coming in", "a fire that keeps you warm",
    ],
    "value": ["quiet mornings", "old friends", "a good night's sleep", "family dinners", "honest people", "time outdoors", "small kindnesses", "home cooking", "laughing until it hurts"],
    "abstract_feel": ["heavy", "light", "fragile", "infinite", "quiet", "sweet", "strange", "bittersweet"],
    "condition": ["you share it", "you least expect it", "it rains", "you're far from home", "the year ends", "someone leaves", "spring comes back"],
    "turning_point": [
        "ending is also a beginning", "goodbye is also a hello", "sunset is also a sunrise somewhere",
        "winter ends in spring", "closed door is also an open window", "storm is followed by a rainbow",
    ],
    # --- more slots for questions, requests, social and abstract messages -----------------
    "season": ["spring", "summer", "autumn", "winter"],
    "month": ["January", "March", "May", "July", "August", "October", "December"],
    "language": ["Spanish", "Japanese", "French", "Italian", "German", "Korean", "Portuguese"],
    "phrase": ["thank you", "good morning", "cheers", "I love you", "where is the beach", "one coffee please", "happy birthday"],
    "party_place": ["the picnic", "the barbecue", "the party", "game night", "the potluck", "the beach"],
    "thanks": ["Thanks!", "Thank you so much!", "You're the best!", "I owe you one!", "Much appreciated.", ""],
    "greeting": ["Hi", "Hey", "Hello", "Morning", "Yo", "Evening", "Howdy"],
    "sign_off": ["", "Hugs!", "Love you!", "See you soon!", "Take care!", "xoxo"],
    "need": ["time", "patience", "practice", "sunlight", "courage", "a little faith", "room to grow"],
    "abstract_tail": [
        "you only see it looking back", "and nobody gets a map", "and that's okay", "and it takes a lifetime to learn",
        "even on the hard days", "you just have to keep going",
    ],
    # --- edge cases --------------------------------------------------------------------
    "one_word": [
        "Pizza", "Mondays", "Coffee", "Snow", "Tacos", "Beach", "Vacation", "Homework", "Sushi", "Rain",
        "Birthday", "Ugh", "Yes", "Nope", "Wow", "Sleep", "Hungry", "Congrats", "Weekend", "Party",
        "Deadline", "Puppies", "Taxes", "Summer", "Fireworks", "Dentist", "Pancakes", "Football", "Goodnight", "Tired",
        "Love", "Thunder", "Donuts", "Christmas", "Exams", "Music", "Traffic", "Freedom", "Ramen", "Cake",
    ],
    "punct": ["!", ".", "?", "!!!", "?!", "...", ""],
    # Clauses ("my train is late again") and noun phrases ("another delay") fit different templates.
    "annoyance": [
        "my train is late again", "it's raining on my day off", "the printer jammed again",
        "the wifi died during my presentation", "my flight is delayed six hours", "I have three exams on the same day",
        "the neighbors are drilling at 7am", "I got a parking ticket", "the coffee machine is broken",
        "my ice cream melted before I could eat it", "the cat threw up on my homework", "my umbrella flipped inside out",
    ],
    "annoyance_np": [
        "another meeting that could have been an email", "a six-hour flight delay", "three exams on the same day",
        "drilling next door at 7am", "a parking ticket", "a broken coffee machine", "rain on my day off",
        "a flat tire in the rain", "cold pizza for breakfast", "a printer jam before the deadline", "a two-hour traffic jam",
    ],
    "sarcastic_tail": [
        "Just what I needed.", "Love that for me.", "Living the dream.", "Best. Day. Ever.", "Perfect timing as always.",
        "Truly thrilled.", "Could this week get any better?", "What a treat.",
    ],
    "slang": ["lol same", "omg no way", "ok ok ok", "lmao", "brb", "nvm", "idk", "ttyl", "yay", "meh", "oops", "hmm", "sure thing", "whatever", "k thx"],
    "errand": ["grabbing coffee", "walking the dog", "at the gym", "making dinner", "in a meeting", "at the store", "driving"],
    "caps_win": ["WE WON", "IT'S SNOWING", "SHE SAID YES", "I PASSED", "WE'RE GOING TO DISNEY", "PIZZA IS HERE", "SCHOOL'S OUT", "IT'S A GIRL", "GOAL"],
}
