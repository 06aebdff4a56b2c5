"""Writes N lines of Avazu's CSV format (its header, its 24 columns, hex and
decimal ids as Avazu's are) whose clicks follow the site, the app and the
hour: avazu_like.py N SEED > FILE. tests/e2e_data.sh trains configs/avazu.ini
on it."""
import random, sys
random.seed(int(sys.argv[2]))
cols = "id,click,hour,C1,banner_pos,site_id,site_domain,site_category,app_id,app_domain,app_category,device_id,device_ip,device_model,device_type,device_conn_type,C14,C15,C16,C17,C18,C19,C20,C21".split(',')
print(','.join(cols))
for i in range(int(sys.argv[1])):
    site = random.randrange(300); app = random.randrange(200); dev = random.randrange(5000)
    hour = 14102100 + random.randrange(24)
    p = 0.05 + 0.3 * (site % 7 == 0) + 0.2 * (app % 5 == 0) + 0.1 * (hour % 24 > 18)
    y = 1 if random.random() < p else 0
    row = [str(10000000000000000000 + i), str(y), str(hour), '1005', str(random.randrange(3)),
           '%08x' % (site * 2654435761 % 2**32), '%08x' % (site * 40503 % 2**32), '%08x' % (site % 20),
           '%08x' % (app * 2246822519 % 2**32), '%08x' % (app % 50), '%08x' % (app % 9),
           '%08x' % (dev * 3266489917 % 2**32), '%08x' % random.randrange(2**32), '%08x' % (dev % 300),
           str(dev % 5), str(random.randrange(4)), str(15000 + site), '320', '50', str(1700 + app),
           str(random.randrange(4)), str(35 + app % 7), str(random.choice([-1, 100000 + site])), str(79 + app % 30)]
    print(','.join(row))
